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
	exact    map[string]struct{}
	prefixes []string // each ends in "/"
}

// NewAllowlist parses allowlist patterns. A pattern is a repository name
// without tag or digest ("registry.example/team/app", "alpine"), or a
// prefix ending in "/*" ("registry.example/team/*", "registry.example/*").
// Names are normalized as RepositoryName does, so "alpine" means
// "docker.io/library/alpine". An invalid pattern is an error naming its
// index and value.
func NewAllowlist(patterns []string) (*Allowlist, error) {
	a := &Allowlist{exact: make(map[string]struct{}, len(patterns))}
	for i, p := range patterns {
		field := fmt.Sprintf("preloadedImagesVerificationAllowlist[%d]", i)
		if base, ok := strings.CutSuffix(p, "/*"); ok {
			prefix, err := normalizePrefix(base)
			if err != nil {
				return nil, fmt.Errorf("%w: %s %q: %v", ErrInvalidPolicy, field, p, err)
			}
			a.prefixes = append(a.prefixes, prefix)
			continue
		}
		if strings.ContainsAny(p, "*?[") {
			return nil, fmt.Errorf("%w: %s %q: only a trailing \"/*\" wildcard is allowed", ErrInvalidPolicy, field, p)
		}
		repo, suffix, err := splitImage(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: not a repository name", ErrInvalidPolicy, field, p)
		}
		if suffix != "" {
			return nil, fmt.Errorf("%w: %s %q: must not have a tag or digest", ErrInvalidPolicy, field, p)
		}
		a.exact[repo] = struct{}{}
	}
	return a, nil
}

// normalizePrefix turns the part before "/*" into a normalized prefix
// ending in "/": a bare registry host ("registry.example") stands for the
// whole registry; anything else is normalized as the parent of a
// repository, so "team/*" means "docker.io/team/".
func normalizePrefix(base string) (string, error) {
	if base == "" || strings.ContainsAny(base, "*?[@") {
		return "", errors.New("the part before \"/*\" must be a registry host or repository path")
	}
	if !strings.Contains(base, "/") && (base == "localhost" || strings.ContainsAny(base, ".:")) {
		if !validHost(base) {
			return "", errors.New("malformed registry host")
		}
		host := strings.ToLower(base)
		if host == dockerHubLegacy {
			host = dockerHub
		}
		return host + "/", nil
	}
	// Normalize "base/x" and cut the "x" off again: this applies the same
	// defaults (registry, library namespace) as a real repository under it.
	repo, suffix, err := splitImage(base + "/x")
	if err != nil || suffix != "" {
		return "", errors.New("not a repository path")
	}
	return strings.TrimSuffix(repo, "x"), nil
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
