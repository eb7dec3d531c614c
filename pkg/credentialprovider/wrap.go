package credentialprovider

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	configv1 "k8s.io/kubelet/config/v1"
)

// The wrapper: `pullguard credential-provider`, an exec credential
// provider that runs the configured plugin for the kubelet, hands the
// kubelet the plugin's answer unchanged, and announces the keyed hashes of
// what it handed to pullguard serve (package announce). WrapProvider
// rewrites a kubelet CredentialProviderConfig entry to run it.
const (
	// WrapperCommand is the pullguard subcommand the wrapped entry runs.
	WrapperCommand = "credential-provider"
	// WrapperPrefix starts the name of a wrapped entry: the kubelet runs
	// <bin-dir>/<name>, so the installer links <bin-dir>/pullguard-<name>
	// to the pullguard executable, one link per wrapped plugin (the
	// kubelet requires unique names).
	WrapperPrefix = "pullguard-"

	// The wrapper's flags, before "--" and the plugin's own arguments.
	FlagPlugin               = "plugin"
	FlagDefaultCacheDuration = "default-cache-duration"
	FlagMatchImage           = "match-image"
	FlagRootDir              = "root-dir"
)

// Wrapper is what a wrapped entry's args tell `pullguard credential-provider`.
type Wrapper struct {
	// Plugin is the real plugin: a name, resolved beside the wrapper's
	// link in the kubelet's bin directory, or an absolute path.
	Plugin string
	// DefaultCacheDuration and MatchImages are the entry's own: the
	// wrapper cannot read the kubelet's configuration, and needs them to
	// say how long, and for which images, the kubelet hands the answer out.
	DefaultCacheDuration time.Duration
	MatchImages          []string
	// RootDir is pullguard serve's --root-dir; "" is the wrapper's
	// default (/var/lib/pullguard).
	RootDir string
	// Args are the plugin's own arguments.
	Args []string
}

// ArgList returns the wrapped entry's args: the subcommand, the wrapper's
// flags, "--" and the plugin's arguments (which may start with "-").
func (w Wrapper) ArgList() []string {
	out := []string{WrapperCommand, "--" + FlagPlugin, w.Plugin, "--" + FlagDefaultCacheDuration, w.DefaultCacheDuration.String()}
	for _, m := range w.MatchImages {
		out = append(out, "--"+FlagMatchImage, m)
	}
	if w.RootDir != "" {
		out = append(out, "--"+FlagRootDir, w.RootDir)
	}
	out = append(out, "--")
	return append(out, w.Args...)
}

// ParseWrapperArgs reads the args ArgList wrote. ok is false for args of
// any other shape (an entry that is not wrapped).
func ParseWrapperArgs(args []string) (w Wrapper, ok bool) {
	if len(args) == 0 || args[0] != WrapperCommand {
		return Wrapper{}, false
	}
	rest := args[1:]
	for len(rest) > 0 {
		if rest[0] == "--" {
			w.Args = slices.Clone(rest[1:])
			return w, w.Plugin != ""
		}
		if len(rest) < 2 {
			return Wrapper{}, false
		}
		name, value := strings.TrimPrefix(rest[0], "--"), rest[1]
		switch name {
		case FlagPlugin:
			w.Plugin = value
		case FlagDefaultCacheDuration:
			d, err := time.ParseDuration(value)
			if err != nil {
				return Wrapper{}, false
			}
			w.DefaultCacheDuration = d
		case FlagMatchImage:
			w.MatchImages = append(w.MatchImages, value)
		case FlagRootDir:
			w.RootDir = value
		default:
			return Wrapper{}, false
		}
		rest = rest[2:]
	}
	return Wrapper{}, false
}

// ErrNotWrappable is returned by WrapProvider for an entry it leaves as it
// is.
var ErrNotWrappable = errors.New("credential provider entry is not wrapped")

// WrapProvider returns the kubelet CredentialProviderConfig entry p
// rewritten to run its plugin through `pullguard credential-provider`:
//
//   - name: WrapperPrefix + p.Name (the link to pullguard in the bin
//     directory, WrapperLink);
//   - args: the subcommand, the real plugin's name, the entry's
//     defaultCacheDuration and matchImages, rootDir when set, "--", then
//     p's args;
//   - matchImages, defaultCacheDuration, apiVersion and env unchanged:
//     the kubelet runs the wrapper exactly when it ran the plugin, with the
//     same environment, which the wrapper passes on.
//
// An entry with tokenAttributes is not wrapped (ErrNotWrappable): its
// answers are a pod's service account's, never the node's. Nor is an
// entry already wrapped (ErrNotWrappable), so that a second install
// changes nothing. p is not modified.
func WrapProvider(p configv1.CredentialProvider, rootDir string) (configv1.CredentialProvider, error) {
	if p.TokenAttributes != nil {
		return p, fmt.Errorf("%w: %q has tokenAttributes (its credentials are a pod's)", ErrNotWrappable, p.Name)
	}
	if _, ok := ParseWrapperArgs(p.Args); ok {
		return p, fmt.Errorf("%w: %q is wrapped already", ErrNotWrappable, p.Name)
	}
	w := Wrapper{Plugin: p.Name, MatchImages: slices.Clone(p.MatchImages), RootDir: rootDir, Args: slices.Clone(p.Args)}
	if p.DefaultCacheDuration != nil {
		w.DefaultCacheDuration = p.DefaultCacheDuration.Duration
	}
	out := p
	out.Name = WrapperPrefix + p.Name
	out.Args = w.ArgList()
	out.MatchImages = slices.Clone(p.MatchImages)
	out.Env = slices.Clone(p.Env)
	return out, nil
}

// UnwrapProvider returns the entry WrapProvider rewrote as it was, or
// false for an entry that is not wrapped.
func UnwrapProvider(p configv1.CredentialProvider) (configv1.CredentialProvider, bool) {
	w, ok := ParseWrapperArgs(p.Args)
	if !ok || p.Name != WrapperLink(w.Plugin) {
		return p, false
	}
	out := p
	out.Name = w.Plugin
	out.Args = w.Args
	if len(out.Args) == 0 {
		out.Args = nil
	}
	return out, true
}

// WrapperLink is the name, in the kubelet's bin directory, of the link to
// the pullguard executable that runs plugin for the kubelet.
func WrapperLink(plugin string) string { return WrapperPrefix + plugin }
