package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/pkg/announce"
	"github.com/pullguard/pullguard/pkg/credential"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// maxRequest bounds the kubelet's request (an image, a service account
// token and its annotations).
const maxRequest = 1 << 20

// announceTimeout bounds the announcement: the kubelet waits for the
// wrapper to exit before it uses the answer.
const announceTimeout = 5 * time.Second

type credentialProviderOptions struct {
	cp.Wrapper
	timeout time.Duration
	grace   time.Duration
	// argv0 is how the kubelet ran the wrapper (<bin-dir>/<name>): a
	// plugin given by name is beside it.
	argv0 string
}

func newCredentialProviderCommand() *cobra.Command {
	o := &credentialProviderOptions{argv0: os.Args[0]}
	cmd := &cobra.Command{
		Use:   cp.WrapperCommand + " --plugin NAME [flags] -- [PLUGIN ARGS...]",
		Short: "Run a kubelet credential provider plugin for the kubelet and tell serve what it answered",
		Long: `credential-provider is an exec credential provider: the kubelet's
CredentialProviderConfig names it (through a link in the kubelet's plugin bin
directory) in place of a plugin, so that serve knows the node's credentials
even from a plugin that mints a token per call (ECR's). It runs the plugin
(--plugin: a name beside the link, or an absolute path) with the arguments
after "--", the kubelet's request on stdin and its own environment (the
kubelet's, with the entry's env), and gives the kubelet the plugin's stdout
unchanged, its stderr (at most 64 KiB) and its exit status.

When the plugin succeeds and the request carries no service account token, it
writes the keyed hash of each credential answered (never the credential), with
its image pattern, into <root-dir>/node-credentials, for as long as the kubelet
hands the answer out (the response's cacheDuration, else
--default-cache-duration) plus --announce-grace. An announcement that cannot be
written is reported on stderr and never fails the kubelet's look-up.
See docs/serve.md, "Node credentials".`,
		Example: `  # What the kubelet runs for a wrapped entry (pullguard install writes it):
  /etc/kubernetes/credential-providers/pullguard-ecr-credential-provider \
    credential-provider --plugin ecr-credential-provider \
    --default-cache-duration 12h0m0s --match-image '*.dkr.ecr.*.amazonaws.com' -- get-credentials`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = args
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVar(&o.Plugin, cp.FlagPlugin, "", "the real plugin: a name, run from the directory of the link the kubelet ran (its --image-credential-provider-bin-dir), or an absolute path")
	f.DurationVar(&o.DefaultCacheDuration, cp.FlagDefaultCacheDuration, 0, "the provider's defaultCacheDuration: how long the kubelet hands out an answer that sets no cacheDuration")
	f.StringArrayVar(&o.MatchImages, cp.FlagMatchImage, nil, "the provider's matchImages (repeat the flag): the images the kubelet hands the answer out for")
	f.StringVar(&o.RootDir, cp.FlagRootDir, SystemRootDir, "pullguard serve's --root-dir: announcements go to its node-credentials directory")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long the plugin may run (the kubelet kills the wrapper, and with it the plugin, after its own minute)")
	f.DurationVar(&o.grace, "announce-grace", announce.DefaultGrace, "added to how long an announcement counts, for the pull that follows a look-up and may wait behind other pulls")
	return cmd
}

// pluginStatus is how the plugin ended when that was not a success: the
// wrapper ends the same way (execute exits with it).
type pluginStatus struct {
	code int
	sig  syscall.Signal
}

func (e *pluginStatus) Error() string {
	if e.sig != 0 {
		return "the plugin was killed by " + e.sig.String()
	}
	return fmt.Sprintf("the plugin exited with status %d", e.code)
}

// exit ends the process as the plugin ended: by the same signal, or with
// the same status.
func (e *pluginStatus) exit() int {
	if e.sig != 0 {
		signal.Reset(e.sig)
		_ = syscall.Kill(os.Getpid(), e.sig)
		return 128 + int(e.sig) // a signal that does not end a process
	}
	return e.code
}

func (o *credentialProviderOptions) run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
	path, err := o.pluginPath()
	if err != nil {
		return err
	}
	request, err := boundedread.Read(stdin, maxRequest)
	if err != nil {
		return fmt.Errorf("failed to read the kubelet's request: %w", err)
	}
	out, err := cp.Passthrough(ctx, cp.Invocation{
		Path: path, Args: o.Args, Env: os.Environ(), Stdin: request,
		Stdout: stdout, Timeout: o.timeout,
	})
	if len(out.Stderr) > 0 {
		_, _ = stderr.Write(out.Stderr)
		if out.StderrCut {
			fmt.Fprintf(stderr, "\n[pullguard credential-provider: the plugin's stderr was cut at %d bytes]\n", len(out.Stderr))
		}
	}
	if err != nil {
		return err
	}
	if out.Signal != 0 || out.ExitCode != 0 {
		return &pluginStatus{code: out.ExitCode, sig: out.Signal}
	}
	if !out.StdoutComplete {
		return nil // the kubelet got it all; too large to announce
	}
	if err := o.announce(request, out.Stdout); err != nil {
		// Never fails the look-up: the pulls are then filed as the pods'.
		fmt.Fprintf(stderr, "pullguard credential-provider: not announced to serve (pulls with this answer count as the pods' credentials): %v\n", err)
	}
	return nil
}

// pluginPath resolves --plugin, and refuses a plugin that is the wrapper
// itself (a wrapped entry that names its own link would run itself
// forever).
func (o *credentialProviderOptions) pluginPath() (string, error) {
	p := o.Plugin
	switch {
	case p == "":
		return "", errors.New("--plugin is required")
	case filepath.IsAbs(p):
	case filepath.Base(p) != p:
		return "", fmt.Errorf("--plugin %q: a name in the plugin bin directory, or an absolute path", p)
	default:
		p = filepath.Join(filepath.Dir(o.argv0), p)
	}
	self, err1 := os.Executable()
	target, err2 := filepath.EvalSymlinks(p)
	if err1 == nil && err2 == nil {
		if selfReal, err := filepath.EvalSymlinks(self); err == nil && selfReal == target {
			return "", fmt.Errorf("--plugin %q is pullguard itself, not a plugin", o.Plugin)
		}
	}
	return p, nil
}

// announce writes what the plugin answered the kubelet, unless the
// request carried a service account token (the answer is then a pod's) or
// either does not decode. It gives up after announceTimeout.
func (o *credentialProviderOptions) announce(request, response []byte) error {
	req, err := cp.DecodeRequest(request)
	if err != nil {
		return fmt.Errorf("the kubelet's request: %w", err)
	}
	if req.ServiceAccountToken != "" {
		return nil // a pod's service account's credentials, never the node's
	}
	resp, err := cp.DecodeResponse(req.APIVersion, response)
	if err != nil {
		return fmt.Errorf("the plugin's response: %w", err)
	}
	ans := announce.Answer{
		Provider:      filepath.Base(o.Plugin),
		Image:         req.Image,
		CacheKeyType:  announce.Scope(resp.CacheKeyType),
		CacheDuration: o.DefaultCacheDuration,
		MatchImages:   o.MatchImages,
		Auth:          make(map[string]credential.AuthConfig, len(resp.Auth)),
	}
	if resp.CacheDuration != nil {
		ans.CacheDuration = *resp.CacheDuration
	}
	for k, a := range resp.Auth {
		ans.Auth[k] = credential.AuthConfig{Username: a.Username, Password: a.Password}
	}
	done := make(chan error, 1)
	go func() {
		w, err := announce.NewWriter(filepath.Join(o.RootDir, announce.Dir), announce.WithGrace(o.grace))
		if err == nil {
			err = w.Write(ans)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(announceTimeout):
		return fmt.Errorf("writing into %s took over %v", filepath.Join(o.RootDir, announce.Dir), announceTimeout)
	}
}
