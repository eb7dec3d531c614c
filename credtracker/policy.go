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

// NewAllowlist parses allowlist patterns with the kubelet's rules:
//
//   - a pattern is either a normalized repository name, exactly as the
//     kubelet normalizes it ("docker.io/library/alpine",
//     "registry.example/team/app"; not "alpine", not with a tag or
//     digest), or a prefix ending in "/*" ("registry.example/team/*"),
//     compared with the normalized name as written (not normalized);
//   - no leading or trailing white space, no '*' anywhere else.
//
// An invalid pattern is an error naming the field, its index and value,
// with the kubelet's reason.
func NewAllowlist(patterns []string) (*Allowlist, error) {
	a := &Allowlist{exact: make(map[string]struct{}, len(patterns))}
	for i, p := range patterns {
		prefix, wildcard, err := allowlistPattern(p)
		if err != nil {
			return nil, fmt.Errorf("%w: preloadedImagesVerificationAllowlist[%d] %q: %w", ErrInvalidPolicy, i, p, err)
		}
		if !wildcard {
			a.exact[prefix] = struct{}{}
			continue
		}
		a.prefixes = append(a.prefixes, prefix)
		// A prefix no normalized name can start with ("team/*": a Docker
		// Hub name always starts with "docker.io/") is accepted, as the
		// kubelet accepts it, but reported.
		if repo, err := RepositoryName(prefix + "x"); err != nil || !strings.HasPrefix(repo, prefix) {
			a.unmatchable = append(a.unmatchable, p)
		}
	}
	return a, nil
}

// allowlistPattern checks one pattern and returns the exact name, or the
// prefix (ending in "/") of a wildcard.
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
	if suffix != "" || repo != trimmed {
		if suffix == "" {
			return "", false, fmt.Errorf("not a normalized repository name: the kubelet accepts only %q", repo)
		}
		return "", false, errors.New("neither tag nor digest is accepted in an image reference")
	}
	return trimmed, false, nil
}

// Unmatchable returns the wildcard patterns that no normalized repository
// name can match (such as "team/*", as Docker Hub names start with
// "docker.io/"). The kubelet accepts them silently; pullguard accepts them
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
