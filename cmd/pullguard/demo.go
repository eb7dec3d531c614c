package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/podworkers"
	"github.com/pullguard/pullguard/pkg/registry"
)

func newDemoCommand() *cobra.Command {
	var rootDir, output string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the multi-tenant story on an embedded registry and runtime",
		Long: `demo starts a registry (on 127.0.0.1, with per-repository access for three
tenants) and pullguard's embedded runtime, and plays the story pullguard exists
for: tenant A pulls its private image; tenant B, without A's credentials, is
refused by the registry (IfNotPresent) or told the image is not present
(Never); A's next pod starts with no registry contact; tenant C, with its own
credentials, is verified by one manifest request; a preloaded image stays free;
and after a restart the protection still holds. It needs nothing but Go, and
exits non-zero if any outcome differs from the expected one.

Its tables fit the terminal (COLUMNS, else the terminal's width, else 120
columns): the kubelet's long event messages are cut, and -o wide prints them
whole.`,
		Example: `  pullguard demo
  pullguard demo -o wide                          # the events' messages whole, with their times
  pullguard demo --root-dir /tmp/pullguard-demo   # keep the state to inspect with 'pullguard records'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != formatTable && output != formatWide {
				return fmt.Errorf("--output must be table or wide, not %q", sanitize(output))
			}
			dir := rootDir
			if dir == "" {
				tmp, err := os.MkdirTemp("", "pullguard-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				dir = tmp
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), dir, rootDir != "", output)
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", "", "keep the demo's state here (default: a temporary directory, removed afterwards)")
	cmd.Flags().StringVarP(&output, "output", "o", formatTable, "output format: table, or wide for the events' whole messages")
	return cmd
}

// demoStep is one step of the story: pods to run (or a restart), and what
// must happen.
type demoStep struct {
	title   string
	restart bool
	pods    string // YAML, with {{REG}} for the registry host
	want    []demoWant
}

type demoWant struct {
	err       string // "" for success
	pulled    bool
	manifests int // manifest requests by the step, -1: don't check
	blobs     int
}

const demoSecrets = `
apiVersion: v1
kind: Secret
metadata: {name: regcred, namespace: team-a}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{"auths":{"{{REG}}":{"username":"alice","password":"{{PW_alice}}"}}}'}
---
apiVersion: v1
kind: Secret
metadata: {name: regcred, namespace: team-c}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{"auths":{"{{REG}}":{"username":"carol","password":"{{PW_carol}}"}}}'}
`

func demoPod(ns, name, image, policy string, secret bool) string {
	s := ""
	if secret {
		s = "\n  imagePullSecrets: [{name: regcred}]"
	}
	return fmt.Sprintf("---\napiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s}\nspec:%s\n  containers: [{name: app, image: '%s', imagePullPolicy: %s}]\n", name, ns, s, image, policy)
}

func demoSteps() []demoStep {
	private := "{{REG}}/team-a/app:v1"
	preloaded := "{{REG}}/vendor/agent:1"
	return []demoStep{
		{title: "1. tenant A pulls its private image with its secret",
			pods: demoPod("team-a", "app-1", private, "IfNotPresent", true),
			want: []demoWant{{pulled: true, manifests: -1, blobs: -1}}},
		{title: "2. tenant B, no credentials, IfNotPresent: the registry decides",
			pods: demoPod("team-b", "intruder", private, "IfNotPresent", false),
			want: []demoWant{{err: "ErrImagePull", pulled: true, manifests: 1, blobs: 0}}},
		{title: "3. tenant B, Never: as if the image were absent",
			pods: demoPod("team-b", "intruder-never", private, "Never", false),
			want: []demoWant{{err: "ErrImageNeverPull", manifests: 0, blobs: 0}}},
		{title: "4. tenant A's second pod: same credentials, no registry contact",
			pods: demoPod("team-a", "app-2", private, "IfNotPresent", true),
			want: []demoWant{{manifests: 0, blobs: 0}}},
		{title: "5. tenant C, its own credentials: verified by one manifest request",
			pods: demoPod("team-c", "app", private, "IfNotPresent", true),
			want: []demoWant{{pulled: true, manifests: 1, blobs: 0}}},
		{title: "6. a preloaded image stays free for everyone",
			pods: demoPod("team-b", "agent", preloaded, "Never", false),
			want: []demoWant{{manifests: 0, blobs: 0}}},
		{title: "7. restart (a new process over the same state)", restart: true},
		{title: "8. after the restart: tenant B still refused, tenant A still free",
			pods: demoPod("team-b", "intruder-again", private, "Never", false) + demoPod("team-a", "app-3", private, "IfNotPresent", true),
			want: []demoWant{{err: "ErrImageNeverPull", manifests: 0, blobs: 0}, {manifests: 0, blobs: 0}}},
	}
}

func randomPassword() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func runDemo(ctx context.Context, out io.Writer, rootDir string, kept bool, format string) error {
	reg, fill, err := startDemoRegistry(ctx, rootDir)
	if err != nil {
		return err
	}
	defer reg.Close()

	fmt.Fprintf(out, "pullguard demo: registry %s (team-a/app readable by alice and carol; vendor/* by alice)\nstate in %s\n\n", reg.Host(), rootDir)
	start := func() (*podworkers.Node, error) {
		settings, err := nodeconfig.ResolveSettings(nil, nodeconfig.Flags{})
		if err != nil {
			return nil, err
		}
		return podworkers.Start(ctx, podworkers.Config{RootDir: rootDir, Settings: settings, Logger: klog.Background()})
	}
	n, err := start()
	if err != nil {
		return err
	}
	defer func() { n.Close() }()

	// Each step's title on a line of its own, its pods below; a long
	// reason goes on over the next lines rather than being cut.
	width := fitWidth(out, format)
	t := &table{cols: []column{{header: "POD", min: 12}, {header: "POLICY", min: 12}, {header: "RESULT", min: 17}, {header: "REGISTRY REQUESTS", min: 18},
		{header: "WHY", min: 12, first: true, wrap: true}, {header: "AS EXPECTED"}}}
	failures := 0
	var events []podworkers.Event
	for _, step := range demoSteps() {
		t.addTitle(step.title)
		if step.restart {
			events = append(events, n.Events.Events()...)
			n.Close()
			if n, err = start(); err != nil {
				return err
			}
			continue
		}
		differ, err := runDemoStep(ctx, n, reg, fill, step, t)
		if err != nil {
			return err
		}
		failures += differ
	}
	if err := t.write(out, width); err != nil {
		return err
	}
	events = append(events, n.Events.Events()...)
	if err := writeEvents(out, events, format == formatWide, width); err != nil {
		return err
	}
	return writeDemoVerdict(out, failures, kept, rootDir)
}

// startDemoRegistry starts the demo's registry, where alice and carol (each
// with a random password) may read team-a/app and alice vendor/*, pushes
// team-a/app:v1 to it, and side-loads vendor/agent:1 into the embedded
// runtime under rootDir as a preloaded image. fill puts the registry's host
// and the passwords into a template's {{REG}}, {{PW_alice}} and
// {{PW_carol}}. On success the caller closes the registry.
func startDemoRegistry(ctx context.Context, rootDir string) (reg *registry.Registry, fill *strings.Replacer, err error) {
	pw := map[string]string{"alice": randomPassword(), "carol": randomPassword()}
	reg, err = registry.New(registry.Config{
		Users: []registry.User{{Name: "alice", Password: pw["alice"]}, {Name: "carol", Password: pw["carol"]}},
		Repositories: []registry.Repository{
			{Name: "team-a/app", Readers: []string{"alice", "carol"}},
			{Name: "vendor/*", Readers: []string{"alice"}},
		},
	}, registry.WithBcryptCost(bcrypt.MinCost))
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			reg.Close()
		}
	}()
	img, err := registry.Image(1, 2, 64<<10)
	if err != nil {
		return nil, nil, err
	}
	if _, err := reg.Push(ctx, "team-a/app", "v1", img); err != nil {
		return nil, nil, err
	}
	// The preloaded image: side-loaded into the runtime, never pulled by the node.
	agent, err := registry.Image(2, 1, 16<<10)
	if err != nil {
		return nil, nil, err
	}
	if err := preload(ctx, rootDir, reg.Host()+"/vendor/agent:1", agent); err != nil {
		return nil, nil, err
	}
	return reg, strings.NewReplacer("{{REG}}", reg.Host(), "{{PW_alice}}", pw["alice"], "{{PW_carol}}", pw["carol"]), nil
}

// runDemoStep runs each of step's pods alone on n, with the demo's
// secrets, counting the registry's requests of each, and adds a row per
// pod to t. It returns how many pods' outcomes differ from the step's.
func runDemoStep(ctx context.Context, n *podworkers.Node, reg *registry.Registry, fill *strings.Replacer, step demoStep, t *table) (differ int, err error) {
	m, err := podworkers.Load("demo", []byte(fill.Replace(demoSecrets+step.pods)))
	if err != nil {
		return 0, err
	}
	for i, p := range m.Pods {
		reg.Reset()
		one := &podworkers.Manifests{Secrets: m.Secrets, ServiceAccounts: m.ServiceAccounts, Pods: m.Pods[i : i+1]}
		r := n.Run(ctx, one)[0]
		man, blob := reg.Count(registry.Filter{Kind: registry.KindManifest}), reg.Count(registry.Filter{Kind: registry.KindBlob})
		w := step.want[i]
		ok := r.Error == w.err && r.Pulled == w.pulled && (w.manifests < 0 || man == w.manifests) && (w.blobs < 0 || blob == w.blobs)
		mark := "yes"
		if !ok {
			mark = "NO"
			differ++
		}
		t.add(p.Namespace+"/"+p.Name, string(r.PullPolicy), outcome(r), fmt.Sprintf("%d manifest, %d blob", man, blob), why(r), mark)
	}
	return differ, nil
}

// writeDemoVerdict ends the demo's output: an error if failures outcomes
// differed from the expected ones, else how to keep (or, kept, inspect)
// the state in rootDir.
func writeDemoVerdict(out io.Writer, failures int, kept bool, rootDir string) error {
	if failures > 0 {
		return fmt.Errorf("%d outcomes differ from the expected ones: the protection did not hold", failures)
	}
	fmt.Fprintln(out, "\nEvery outcome is as expected.")
	if kept {
		fmt.Fprintln(out, "Inspect what the node remembers with: pullguard records --root-dir", rootDir)
	} else {
		fmt.Fprintln(out, "Run 'pullguard demo --root-dir DIR' to keep the state, and 'pullguard records --root-dir DIR'\nto inspect it.")
	}
	return nil
}

// preload side-loads an image into the embedded runtime under rootDir, as
// an image baked into a node's disk would be.
func preload(ctx context.Context, rootDir, ref string, img v1.Image) error {
	rt, err := criruntime.NewEmbedded(filepath.Join(rootDir, podworkers.RuntimeDir))
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	_, err = rt.Load(ctx, ref, img)
	return err
}
