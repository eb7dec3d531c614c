package credtracker_test

// This file writes the fixture of testdata/schema1: a store of schema
// version 1 and what the tracker that wrote it made of it. It must be run
// by a tracker that writes schema version 1: testdata/schema1/generate.sh
// copies it into an export of such a commit and runs it there. So it uses
// only the exported API that commit has; TestSchema1StoreIsMigrated
// (schema_test.go) reads what it wrote.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
)

// schema1Credential is a credential as a request presents it: its source
// and keyed hash (made with the fixture's hash key), never its secret.
type schema1Credential struct {
	Source credential.Source `json:"source"`
	Hash   string            `json:"hash"`
}

type schema1Request struct {
	Image       string            `json:"image"`
	ImageRef    string            `json:"imageRef"`
	Names       []string          `json:"names"`
	PullPolicy  corev1.PullPolicy `json:"pullPolicy"`
	Credentials []string          `json:"credentials"`
}

// schema1Run is one start over a copy of the store, under one policy:
// what the tracker holds after the start, its decision on every request
// ("action/reason", in order), and what it holds after them.
type schema1Run struct {
	Policy       credtracker.Policy        `json:"policy"`
	Allowlist    []string                  `json:"allowlist"`
	Status       credtracker.Status        `json:"status"`
	Records      []credtracker.ImageRecord `json:"records"`
	Decisions    []string                  `json:"decisions"`
	RecordsAfter []credtracker.ImageRecord `json:"recordsAfter"`
}

type schema1Expected struct {
	Commit      string                       `json:"commit"`
	Clock       time.Time                    `json:"clock"`
	Inventory   []credtracker.Image          `json:"inventory"`
	Credentials map[string]schema1Credential `json:"credentials"`
	Requests    []schema1Request             `json:"requests"`
	Runs        []schema1Run                 `json:"runs"`
}

const schema1OutEnv = "PULLGUARD_SCHEMA1_OUT"

func TestWriteSchema1Fixture(t *testing.T) {
	out := os.Getenv(schema1OutEnv)
	if out == "" {
		t.Skip("writes the schema version 1 fixture (credtracker/testdata/schema1/generate.sh)")
	}
	const reg = "registry.example"
	ref := func(c byte) string {
		b := make([]byte, 32)
		for i := range b {
			b[i] = c
		}
		return "sha256:" + hex.EncodeToString(b)
	}
	var (
		app, mirror, tool, base  = reg + "/team-a/app:v1", reg + "/mirror/app:v1", reg + "/team-a/tool:1", reg + "/public/base:1"
		old, left, gone, os1     = reg + "/team-a/old:1", reg + "/team-c/left:1", reg + "/team-d/gone:1", reg + "/preloaded/os:1"
		refApp, refTool, refBase = ref(0xa1), ref(0xb2), ref(0xc3)
		refOld, refLeft, refOS   = ref(0xd4), ref(0xe5), ref(0xf6)
	)
	epoch := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(epoch)
	dir := t.TempDir()
	present := []credtracker.Image{{Ref: refOld, Names: []string{old}}}
	inv := credtracker.ImageInventoryFunc(func(context.Context) ([]credtracker.Image, error) { return present, nil })
	start := func(dir string, cfg credtracker.Config) credtracker.Enabled {
		cfg.Dir = dir
		tr, err := credtracker.New(context.Background(), cfg, inv, credtracker.WithClock(clk), credtracker.WithLogger(klog.Background().V(10)))
		require.NoError(t, err)
		return tr
	}

	// A node whose store was once rebuilt (so it holds a StoreStatus and
	// a record of unknown origin), then pulled with secrets, a service
	// account, node credentials and none, and crashed with two pulls in
	// flight.
	tr := start(dir, credtracker.Config{})
	require.NoError(t, tr.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, credtracker.StoreFile), []byte("damaged"), 0o600))
	tr = start(dir, credtracker.Config{})
	require.False(t, tr.Status().RecoveredAt.IsZero())
	h := tr.Hasher()
	secret := func(ns, name, uid, user, pw string) credential.Credential {
		auth := credential.AuthConfig{Username: user, Password: pw}
		return credential.Credential{Registry: reg, Auth: auth, Source: credential.Source{Kind: credential.SourceSecret, Namespace: ns, Name: name, UID: uid}, Hash: h.Hash(reg, auth)}
	}
	token := credential.AuthConfig{RegistryToken: "builder-token"}
	creds := map[string]credential.Credential{
		"secret-a":         secret("team-a", "regcred", "uid-a", "alice", "alice-pw"),
		"secret-b":         secret("team-b", "regcred", "uid-b", "bob", "bob-pw"),
		"secret-a-rotated": secret("team-a", "regcred", "uid-a", "alice", "alice-new-pw"),
		"secret-c":         secret("team-c", "regcred", "uid-c", "carol", "carol-pw"),
		"sa":               {Registry: reg, Auth: token, Source: credential.Source{Kind: credential.SourceServiceAccount, Namespace: "team-a", Name: "builder", UID: "sa-uid"}, Hash: h.Hash(reg, token)},
		"node":             {Registry: reg, Auth: credential.AuthConfig{Username: "node", Password: "node-pw"}, Source: credential.Source{Kind: credential.SourceNode, Name: "config.json"}, Hash: h.Hash(reg, credential.AuthConfig{Username: "node", Password: "node-pw"})},
	}
	for _, p := range []struct {
		image, ref, cred string
	}{
		{app, refApp, "secret-a"}, {app, refApp, "secret-b"}, {mirror, refApp, "node"},
		{tool, refTool, "sa"}, {base, refBase, ""},
	} {
		clk.Step(time.Minute)
		require.NoError(t, tr.RecordPullIntent(p.image))
		require.NoError(t, tr.RecordImagePulled(p.image, p.ref, creds[p.cred]))
	}
	require.NoError(t, tr.RecordPullIntent(left))
	require.NoError(t, tr.RecordPullIntent(gone))
	require.NoError(t, tr.Close())
	for _, f := range []string{credtracker.StoreFile, credtracker.GenerationFile, credtracker.HashKeyFile} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(out, f), data, 0o600))
	}

	// What this code makes of the store at its next start, where the
	// runtime holds the interrupted pull's image and an image with no
	// record, under every policy.
	clk.Step(time.Hour)
	present = []credtracker.Image{
		{Ref: refApp, Names: []string{app, mirror}}, {Ref: refTool, Names: []string{tool}}, {Ref: refBase, Names: []string{base}},
		{Ref: refOld, Names: []string{old}}, {Ref: refLeft, Names: []string{left}}, {Ref: refOS, Names: []string{os1}},
	}
	exp := schema1Expected{Commit: os.Getenv("PULLGUARD_SCHEMA1_COMMIT"), Clock: clk.Now(), Inventory: present, Credentials: map[string]schema1Credential{}}
	for name, c := range creds {
		exp.Credentials[name] = schema1Credential{Source: c.Source, Hash: hex.EncodeToString(c.Hash[:])}
	}
	for _, img := range present {
		for _, credSet := range [][]string{nil, {"secret-a"}, {"secret-b"}, {"secret-a-rotated"}, {"secret-c"}, {"sa"}, {"secret-c", "secret-a"}} {
			for _, pp := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever} {
				exp.Requests = append(exp.Requests, schema1Request{Image: img.Names[0], ImageRef: img.Ref, Names: img.Names, PullPolicy: pp, Credentials: credSet})
			}
		}
	}
	for _, cfg := range []credtracker.Config{
		{Policy: credtracker.NeverVerifyPreloadedImages},
		{Policy: credtracker.AlwaysVerify},
		{Policy: credtracker.NeverVerifyAllowlistedImages, Allowlist: []string{reg + "/public/*"}},
		{Policy: credtracker.NeverVerify},
	} {
		run := t.TempDir()
		for _, f := range []string{credtracker.StoreFile, credtracker.GenerationFile, credtracker.HashKeyFile} {
			data, err := os.ReadFile(filepath.Join(out, f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(run, f), data, 0o600))
		}
		tr := start(run, cfg)
		r := schema1Run{Policy: cfg.Policy, Allowlist: cfg.Allowlist, Status: tr.Status(), Records: tr.Records()}
		for _, req := range exp.Requests {
			var cs []credential.Credential
			for _, name := range req.Credentials {
				cs = append(cs, creds[name])
			}
			d := tr.Decide(credtracker.Request{Image: req.Image, ImageRef: req.ImageRef, Names: req.Names, PullPolicy: req.PullPolicy,
				Credentials: func() []credential.Credential { return cs }})
			r.Decisions = append(r.Decisions, d.Action.String()+"/"+d.Reason.String())
		}
		r.RecordsAfter = tr.Records()
		require.NoError(t, tr.Close())
		exp.Runs = append(exp.Runs, r)
	}
	data, err := json.MarshalIndent(exp, "", " ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(out, "expected.json"), append(data, '\n'), 0o644))
}
