package credtracker

import (
	"errors"
	"fmt"
	"strings"

	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// Policy is the node's image pull credentials verification policy, the
// KubeletConfiguration field imagePullCredentialsVerificationPolicy. It
// decides which present images need credential verification at all.
type Policy = kubeletconfig.ImagePullCredentialsVerificationPolicy

// The policies, with the kubelet's names.
const (
	// NeverVerify never requires verification: any pod may use any
	// present image (the behaviour before KEP-2535, for pulls this node
	// made as well).
	NeverVerify = kubeletconfig.NeverVerify
	// NeverVerifyPreloadedImages requires verification only for images
	// this node pulled under the name the pod uses. Images that arrived
	// some other way (preloaded, side-loaded) are free. The default.
	NeverVerifyPreloadedImages = kubeletconfig.NeverVerifyPreloadedImages
	// NeverVerifyAllowlistedImages requires verification except for
	// preloaded images whose repository matches the allowlist.
	NeverVerifyAllowlistedImages = kubeletconfig.NeverVerifyAllowlistedImages
	// AlwaysVerify requires verification for every present image.
	AlwaysVerify = kubeletconfig.AlwaysVerify
)

// DefaultPolicy is the policy used when none is configured.
const DefaultPolicy = NeverVerifyPreloadedImages

// ErrInvalidPolicy is returned for an unknown policy or an invalid
// allowlist.
var ErrInvalidPolicy = errors.New("invalid image pull credentials verification policy")

// ParsePolicy checks a policy name; the empty string means DefaultPolicy.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case "":
		return DefaultPolicy, nil
	case NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify:
		return p, nil
	default:
		return "", fmt.Errorf("%w: imagePullCredentialsVerificationPolicy %q is not one of %s, %s, %s, %s",
			ErrInvalidPolicy, s, NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify)
	}
}

// Allowlist is the preloadedImagesVerificationAllowlist: repository names
// whose preloaded images need no verification under
// NeverVerifyAllowlistedImages. The zero value matches nothing.
type Allowlist struct {
	exact       map[string]struct{}
	prefixes    []string // each ends in "/"
	unmatchable []string
}

// NewAllowlist parses allowlist patterns, accepting exactly what the
// kubelet's validation accepts:
//
//   - a pattern is either a repository name without tag or digest
//     ("alpine", "docker.io/library/alpine", "registry.example/team/app"),
//     or a prefix ending in "/*" ("registry.example/team/*", "bitnami/*");
//   - no leading or trailing white space, no '*' anywhere else.
//
// The kubelet compares a pattern with the pod's image as the pod spells it,
// so its "alpine" frees "alpine:3" but not "docker.io/library/alpine:3".
// pullguard normalizes both sides, as it normalizes every name: "alpine"
// is docker.io/library/alpine and frees every spelling of that repository;
// "bitnami/*" is the prefix docker.io/bitnami/. A prefix that cannot be
// normalized ("registry.example//*") is kept as written, matches no name, and is listed
// by Unmatchable.
//
// An invalid pattern is an error naming the field, its index and value,
// with the kubelet's reason.
func NewAllowlist(patterns []string) (*Allowlist, error) {
	a := &Allowlist{exact: make(map[string]struct{}, len(patterns))}
	for i, p := range patterns {
		name, wildcard, err := allowlistPattern(p)
		if err != nil {
			return nil, fmt.Errorf("%w: preloadedImagesVerificationAllowlist[%d] %q: %w", ErrInvalidPolicy, i, p, err)
		}
		if !wildcard {
			a.exact[name] = struct{}{}
			continue
		}
		prefix, ok := normalizedPrefix(name)
		if !ok {
			a.unmatchable = append(a.unmatchable, p)
		}
		a.prefixes = append(a.prefixes, prefix)
	}
	return a, nil
}

// allowlistPattern checks one pattern with the kubelet's rules and returns
// the normalized repository name, or the prefix (ending in "/", as
// written) of a wildcard.
func allowlistPattern(p string) (string, bool, error) {
	if p != strings.TrimSpace(p) {
		return "", false, errors.New("leading/trailing spaces are not allowed")
	}
	trimmed, wildcard := p, false
	if strings.HasSuffix(p, "/*") {
		trimmed, wildcard = p[:len(p)-1], true
	}
	switch {
	case trimmed == "":
		return "", false, errors.New("the supplied pattern is too short")
	case strings.ContainsRune(trimmed, '*'):
		return "", false, errors.New("not a valid wildcard pattern, only patterns ending with '/*' are allowed")
	case wildcard && len(trimmed) == 1:
		return "", false, errors.New("at least registry hostname is required")
	case wildcard:
		return trimmed, true, nil
	}
	repo, suffix, err := splitImage(trimmed)
	if err != nil {
		return "", false, fmt.Errorf("failed to parse as an image name: %w", err)
	}
	if suffix != "" {
		return "", false, errors.New("neither tag nor digest is accepted in an image reference")
	}
	return repo, false, nil
}

// normalizedPrefix normalizes a wildcard's prefix (ending in "/") as the
// start of a repository name: "bitnami/" is docker.io/bitnami/,
// "index.docker.io/" is docker.io/, "registry.example/team/" stays. It
// normalizes the prefix followed by two path components (so that neither
// "docker.io/" nor "library/" is mistaken for a whole official-image
// name) and takes them off again. ok is false, and the prefix comes back
// as written, when that is not a repository name.
func normalizedPrefix(prefix string) (string, bool) {
	const probe = "x/x"
	repo, err := RepositoryName(prefix + probe)
	if err != nil || !strings.HasSuffix(repo, "/"+probe) {
		return prefix, false
	}
	return strings.TrimSuffix(repo, probe), true
}

// Unmatchable returns the wildcard patterns that no repository name can
// match, because their prefix is not the start of one
// ("registry.example//*"). The kubelet accepts them silently; pullguard accepts them
// too, and its caller warns.
func (a *Allowlist) Unmatchable() []string {
	if a == nil {
		return nil
	}
	return a.unmatchable
}

// Match reports whether a normalized repository name is allowlisted.
func (a *Allowlist) Match(repo string) bool {
	if a == nil {
		return false
	}
	if _, ok := a.exact[repo]; ok {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(repo, p) {
			return true
		}
	}
	return false
}
