package keyring_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/keyring"
)

// benchSecrets is a pod with three pull secrets of a few entries each.
func benchSecrets() []*corev1.Secret {
	return []*corev1.Secret{
		dockerConfigJSONSecret("team-a", "pull-a", []byte(`{"auths":{
			"registry.example/team-a":{"username":"a","password":"pw-s3cret-Qz8"},
			"*.example":{"username":"wild","password":"pw-s3cret-Qz8"},
			"https://index.docker.io/v1/":{"auth":"`+b64("hub:pw-s3cret-Qz8")+`"}}}`)),
		dockerConfigJSONSecret("team-a", "pull-b", []byte(`{"auths":{
			"registry.example":{"username":"b","password":"pw-s3cret-Qz8"},
			"quay.io/team-a":{"username":"q","password":"pw-s3cret-Qz8"}}}`)),
		dockercfgSecret("team-a", "pull-c", []byte(`{
			"gcr.io":{"username":"_json_key","password":"pw-s3cret-Qz8"},
			"*.azurecr.io":{"username":"sp","password":"pw-s3cret-Qz8"}}`)),
	}
}

func benchPodKeyring(b *testing.B) keyring.Keyring {
	b.Helper()
	h := testHasher(b)
	secrets, errs := keyring.FromSecrets(h, benchSecrets())
	require.Empty(b, errs)
	path := writeFile(b, filepath.Join(b.TempDir(), "config.json"), fixture(b, "config.json"))
	node, err := keyring.NodeKeyring(h, []string{path})
	require.NoError(b, err)
	return keyring.Merge(secrets, node)
}

// BenchmarkPodLookup is the look-up a pod start makes: three secrets and a
// node config, three matching candidates, hashes cached.
func BenchmarkPodLookup(b *testing.B) {
	kr := benchPodKeyring(b)
	ctx := context.Background()
	for _, image := range []string{"registry.example/team-a/app:v1", "alpine:3.20", "unknown.example.org/app"} {
		b.Run(image, func(b *testing.B) {
			_, err := kr.Lookup(ctx, image) // fill the hash caches
			require.NoError(b, err)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, _ = kr.Lookup(ctx, image)
			}
		})
	}
}

// BenchmarkPodLookupParallel checks that look-ups do not contend.
func BenchmarkPodLookupParallel(b *testing.B) {
	kr := benchPodKeyring(b)
	ctx := context.Background()
	_, err := kr.Lookup(ctx, "registry.example/team-a/app:v1")
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = kr.Lookup(ctx, "registry.example/team-a/app:v1")
		}
	})
}

// BenchmarkFromSecretsAndLookup is a fresh pod keyring per look-up, as a
// caller that does not cache keyrings pays it (parsing and hashing).
func BenchmarkFromSecretsAndLookup(b *testing.B) {
	h := testHasher(b)
	secrets := benchSecrets()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		kr, _ := keyring.FromSecrets(h, secrets)
		_, _ = kr.Lookup(ctx, "registry.example/team-a/app:v1")
	}
}

func BenchmarkParseImage(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = keyring.ParseImage("registry.example:5000/team-a/app:v1")
	}
}

func BenchmarkPatternMatch(b *testing.B) {
	p, err := keyring.ParsePattern("*.dkr.ecr.*.amazonaws.com/team")
	require.NoError(b, err)
	im, err := keyring.ParseImage("123456789.dkr.ecr.us-east-1.amazonaws.com/team/app:v1")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if !p.Match(im) {
			b.Fatal("no match")
		}
	}
}

func BenchmarkMatchImage(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = keyring.MatchImage("*.dkr.ecr.*.amazonaws.com", "123456789.dkr.ecr.us-east-1.amazonaws.com/app:v1")
	}
}

// BenchmarkNodeLookup is serve's node keyring look-up of a present image:
// CachedNodeKeyring stats the search list up to the file it read (one
// stat when the kubelet's root directory holds config.json, all eight
// when no file exists) and looks up; "read once" is the same look-up
// without the stats (NodeKeyring).
func BenchmarkNodeLookup(b *testing.B) {
	const image = "registry.example/team-a/app:v1"
	h := testHasher(b)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Now().Add(time.Hour)) // no read is unsure
	for _, tc := range []struct {
		name    string
		present bool
		cached  bool
	}{
		{name: "root config.json, stats", present: true, cached: true},
		{name: "no file, stats", present: false, cached: true},
		{name: "root config.json, read once", present: true, cached: false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			var files []string
			for _, d := range []string{"root", "wd", "home/.docker", ".docker"} {
				files = append(files, filepath.Join(dir, d, "config.json"))
			}
			for _, d := range []string{"root", "wd", "home", ""} {
				files = append(files, filepath.Join(dir, d, ".dockercfg"))
			}
			if tc.present {
				writeFile(b, files[0], fixture(b, "config.json"))
			}
			kr := keyring.CachedNodeKeyring(h, files, clk, nil)
			if !tc.cached {
				var err error
				kr, err = keyring.NodeKeyring(h, files)
				require.NoError(b, err)
			}
			_, err := kr.Lookup(ctx, image) // read, hashes cached
			require.NoError(b, err)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, _ = kr.Lookup(ctx, image)
			}
		})
	}
}
