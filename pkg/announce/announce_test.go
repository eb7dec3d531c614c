package announce_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/announce"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

const (
	ecrA     = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
	ecrB     = "210987654321.dkr.ecr.eu-west-1.amazonaws.com"
	ecrGlob  = "*.dkr.ecr.*.amazonaws.com"
	tokenOne = "minted-token-number-one"
	tokenTwo = "minted-token-number-two"
)

func token(pw string) credential.AuthConfig {
	return credential.AuthConfig{Username: "AWS", Password: pw}
}

// logBuffer collects a logger's lines.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
}

func (l *logBuffer) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// fixture is a root directory with an announcement directory, a writer
// and a fake clock that starts at the real time (file times are real).
type fixture struct {
	dir   string
	clock *clocktesting.FakeClock
	log   *logBuffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return &fixture{
		dir:   filepath.Join(t.TempDir(), announce.Dir),
		clock: clocktesting.NewFakeClock(time.Now()),
		log:   &logBuffer{},
	}
}

func (f *fixture) writer(t *testing.T, opts ...announce.WriterOption) *announce.Writer {
	t.Helper()
	w, err := announce.NewWriter(f.dir, append([]announce.WriterOption{announce.WithWriterClock(f.clock)}, opts...)...)
	require.NoError(t, err)
	return w
}

func (f *fixture) write(t *testing.T, a announce.Answer, opts ...announce.WriterOption) {
	t.Helper()
	require.NoError(t, f.writer(t, opts...).Write(a))
}

// board reads the fixture's directory; readings are never racy unless the
// test says otherwise.
func (f *fixture) board(opts ...announce.BoardOption) *announce.Board {
	never := func() time.Time { return time.Now().Add(time.Hour) }
	return announce.NewBoard(f.dir, append([]announce.BoardOption{
		announce.WithClock(f.clock), announce.WithLogger(f.log.logger()), announce.WithFSNow(never),
	}, opts...)...)
}

func image(t *testing.T, ref string) keyring.Image {
	t.Helper()
	im, err := keyring.ParseImage(ref)
	require.NoError(t, err)
	return im
}

// ecrAnswer is an ECR-like answer for ecrA/team/app.
func ecrAnswer(scope announce.Scope, ttl time.Duration, match ...string) announce.Answer {
	return announce.Answer{
		Provider: "ecr-credential-provider", Image: ecrA + "/team/app",
		CacheKeyType: scope, CacheDuration: ttl, MatchImages: match,
		Auth: map[string]credential.AuthConfig{ecrGlob: token(tokenOne)},
	}
}

// withKey is a with its one credential filed under key.
func withKey(a announce.Answer, key string) announce.Answer {
	a.Auth = map[string]credential.AuthConfig{key: token(tokenOne)}
	return a
}

// hubAnswer is a global answer with tokenOne under Docker Hub's key and
// another credential under docker.io/other.
func hubAnswer() announce.Answer {
	return announce.Answer{
		Provider: "ecr-credential-provider", Image: "docker.io/team/app",
		CacheKeyType: announce.ScopeGlobal, CacheDuration: time.Hour,
		Auth: map[string]credential.AuthConfig{"https://index.docker.io/v1/": token(tokenOne), "docker.io/other": token(tokenTwo)},
	}
}

// TestSource: an announced credential is the node's exactly for the
// images the kubelet hands it out for: its pattern, the provider's
// matchImages and the answer's cache key (Image when not cached).
func TestSource(t *testing.T) {
	tests := []struct {
		name   string
		answer announce.Answer
		image  string
		auth   credential.AuthConfig
		want   bool
	}{
		{name: "registry scope, same image", answer: ecrAnswer(announce.ScopeRegistry, 12*time.Hour), image: ecrA + "/team/app:v1", auth: token(tokenOne), want: true},
		{name: "registry scope, other repository of the registry", answer: ecrAnswer(announce.ScopeRegistry, 12*time.Hour), image: ecrA + "/other/tool", auth: token(tokenOne), want: true},
		{name: "registry scope, other registry the pattern matches", answer: ecrAnswer(announce.ScopeRegistry, 12*time.Hour), image: ecrB + "/team/app", auth: token(tokenOne)},
		{name: "global scope, other registry the pattern matches", answer: ecrAnswer(announce.ScopeGlobal, 12*time.Hour), image: ecrB + "/team/app", auth: token(tokenOne), want: true},
		{name: "global scope, image the pattern does not match", answer: ecrAnswer(announce.ScopeGlobal, 12*time.Hour), image: "docker.io/library/alpine", auth: token(tokenOne)},
		{name: "image scope, same repository", answer: ecrAnswer(announce.ScopeImage, 12*time.Hour), image: ecrA + "/team/app@sha256:" + strings.Repeat("a", 64), auth: token(tokenOne), want: true},
		{name: "image scope, other repository", answer: ecrAnswer(announce.ScopeImage, 12*time.Hour), image: ecrA + "/team/app2", auth: token(tokenOne)},
		{name: "not cached: image scope whatever the key type", answer: ecrAnswer(announce.ScopeGlobal, 0), image: ecrA + "/other/tool", auth: token(tokenOne)},
		{name: "not cached: the asked image", answer: ecrAnswer(announce.ScopeGlobal, 0), image: ecrA + "/team/app", auth: token(tokenOne), want: true},
		{name: "matchImages narrower than the pattern", answer: ecrAnswer(announce.ScopeGlobal, time.Hour, ecrA+"/team"), image: ecrA + "/other/tool", auth: token(tokenOne)},
		{name: "matchImages cover the image", answer: ecrAnswer(announce.ScopeGlobal, time.Hour, ecrA+"/team", ecrA+"/other"), image: ecrA + "/other/tool", auth: token(tokenOne), want: true},
		{name: "another token", answer: ecrAnswer(announce.ScopeGlobal, time.Hour), image: ecrA + "/team/app", auth: token(tokenTwo)},
		{name: "another username", answer: ecrAnswer(announce.ScopeGlobal, time.Hour), image: ecrA + "/team/app", auth: credential.AuthConfig{Username: "other", Password: tokenOne}},
		{name: "a field the kubelet never sends of a plugin's credential", answer: ecrAnswer(announce.ScopeGlobal, time.Hour), image: ecrA + "/team/app", auth: credential.AuthConfig{Username: "AWS", Password: tokenOne, IdentityToken: "x"}},
		{name: "anonymous", answer: ecrAnswer(announce.ScopeGlobal, time.Hour), image: ecrA + "/team/app"},
		// Keys are filed and matched as the kubelet files and matches a
		// plugin's auth keys (pkg/keyring).
		{name: "a key with a scheme and /v2/ is filed as the host", answer: withKey(ecrAnswer(announce.ScopeGlobal, time.Hour), "https://"+ecrA+"/v2/"), image: ecrA + "/team/app", auth: token(tokenOne), want: true},
		{name: "hosts compared as written", answer: withKey(ecrAnswer(announce.ScopeGlobal, time.Hour), strings.ToUpper(ecrA)), image: ecrA + "/team/app", auth: token(tokenOne)},
		{name: "registry scope: the registry as the name spells it", answer: ecrAnswer(announce.ScopeRegistry, time.Hour), image: strings.Replace(ecrA, "dkr", "DKR", 1) + "/team/app", auth: token(tokenOne)},
		{name: "Docker Hub key: a Docker Hub image no key of the answer matched", answer: hubAnswer(), image: "docker.io/team/app", auth: token(tokenOne), want: true},
		{name: "Docker Hub key: an image another key of the answer matched", answer: hubAnswer(), image: "docker.io/other/app", auth: token(tokenOne)},
		{name: "Docker Hub key: not a Docker Hub image", answer: hubAnswer(), image: "quay.io/team/app", auth: token(tokenOne)},
		{name: "registry-1.docker.io key: no docker.io image", answer: withKey(ecrAnswer(announce.ScopeGlobal, time.Hour), "registry-1.docker.io"), image: "docker.io/team/app", auth: token(tokenOne)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.write(t, tt.answer)
			src, ok := f.board().Source(image(t, tt.image), tt.auth)
			assert.Equal(t, tt.want, ok)
			if tt.want {
				assert.Equal(t, credential.Source{Kind: credential.SourceNode, Name: "ecr-credential-provider"}, src)
				assert.True(t, src.NodeAccessible())
			}
		})
	}
}

// TestExpiry: an announcement counts for the answer's cache duration (the
// response's, else the provider's default, as the caller gives it) plus
// the grace, and not a moment longer; an answer the kubelet did not cache
// counts for the grace alone.
func TestExpiry(t *testing.T) {
	tests := []struct {
		name  string
		ttl   time.Duration
		grace time.Duration
	}{
		{name: "cached 12h", ttl: 12 * time.Hour, grace: announce.DefaultGrace},
		{name: "not cached", ttl: 0, grace: announce.DefaultGrace},
		{name: "custom grace", ttl: time.Minute, grace: 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.write(t, ecrAnswer(announce.ScopeRegistry, tt.ttl), announce.WithGrace(tt.grace))
			b := f.board()
			im := image(t, ecrA+"/team/app")
			f.clock.SetTime(f.clock.Now().Add(tt.ttl + tt.grace - time.Nanosecond))
			_, ok := b.Source(im, token(tokenOne))
			assert.True(t, ok, "still counts")
			f.clock.SetTime(f.clock.Now().Add(time.Nanosecond))
			_, ok = b.Source(im, token(tokenOne))
			assert.False(t, ok, "expired")
		})
	}
}

// TestBoardReadsOnlyWhenChanged: look-ups read the directory once while
// it does not change, and again after a writer changed it; a directory
// changed within the racy window is read again at each look-up.
func TestBoardReadsOnlyWhenChanged(t *testing.T) {
	f := newFixture(t)
	f.write(t, ecrAnswer(announce.ScopeRegistry, time.Hour))
	b := f.board()
	im := image(t, ecrA+"/team/app")
	for i := 0; i < 5; i++ {
		_, ok := b.Source(im, token(tokenOne))
		require.True(t, ok)
	}
	assert.EqualValues(t, 1, b.Loads(), "unchanged: read once")

	second := ecrAnswer(announce.ScopeRegistry, time.Hour)
	second.Auth = map[string]credential.AuthConfig{ecrGlob: token(tokenTwo)}
	f.write(t, second)
	_, ok := b.Source(im, token(tokenTwo))
	assert.True(t, ok, "the new announcement is seen at the next look-up")
	assert.EqualValues(t, 2, b.Loads())

	fi, err := os.Stat(f.dir)
	require.NoError(t, err)
	racy := f.board(announce.WithFSNow(func() time.Time { return fi.ModTime().Add(time.Second) }))
	for i := 0; i < 3; i++ {
		_, _ = racy.Source(im, token(tokenOne))
	}
	assert.EqualValues(t, 3, racy.Loads(), "changed within the racy window: read at every look-up")
}

// TestWriterBounds: the writer removes expired announcements and leftover
// temporary files, and keeps at most its bound, newest first; the board
// reads at most its own bound, newest first.
func TestWriterBounds(t *testing.T) {
	t.Run("oldest dropped", func(t *testing.T) {
		f := newFixture(t)
		tokens := []string{"token-0-xxxx", "token-1-xxxx", "token-2-xxxx", "token-3-xxxx", "token-4-xxxx"}
		for _, tok := range tokens {
			a := ecrAnswer(announce.ScopeRegistry, time.Hour)
			a.Auth = map[string]credential.AuthConfig{ecrGlob: token(tok)}
			f.write(t, a, announce.WithMaxEntries(3))
			f.clock.Step(time.Second)
		}
		assert.Len(t, entries(t, f.dir), 3)
		b := f.board()
		im := image(t, ecrA+"/team/app")
		for i, tok := range tokens {
			_, ok := b.Source(im, token(tok))
			assert.Equal(t, i >= 2, ok, "token %d", i)
		}
		small := f.board(announce.WithBoardMaxEntries(1))
		_, ok := small.Source(im, token(tokens[4]))
		assert.True(t, ok, "the newest is read")
		_, ok = small.Source(im, token(tokens[3]))
		assert.False(t, ok, "beyond the board's bound")
	})
	t.Run("expired and leftovers removed", func(t *testing.T) {
		f := newFixture(t)
		f.write(t, ecrAnswer(announce.ScopeRegistry, time.Minute))
		leftover := filepath.Join(f.dir, ".tmp-leftover")
		require.NoError(t, os.WriteFile(leftover, []byte("{"), 0o600))
		old := time.Now().Add(-2 * time.Minute)
		require.NoError(t, os.Chtimes(leftover, old, old))
		fresh := filepath.Join(f.dir, ".tmp-fresh")
		require.NoError(t, os.WriteFile(fresh, []byte("{"), 0o600))
		f.clock.Step(time.Hour)
		second := ecrAnswer(announce.ScopeRegistry, time.Minute)
		second.Auth = map[string]credential.AuthConfig{ecrGlob: token(tokenTwo)}
		f.write(t, second)
		assert.Len(t, entries(t, f.dir), 1, "the expired announcement is gone")
		assert.NoFileExists(t, leftover)
		assert.FileExists(t, fresh, "a temporary file another writer may be writing stays")
	})
	t.Run("matchImages that never match left out", func(t *testing.T) {
		f := newFixture(t)
		f.write(t, ecrAnswer(announce.ScopeGlobal, time.Hour, ecrA+"/*", ecrA+"/team"))
		b := f.board()
		_, ok := b.Source(image(t, ecrA+"/team/app"), token(tokenOne))
		assert.True(t, ok, "the entry that matches still counts")
		_, ok = b.Source(image(t, ecrA+"/other/app"), token(tokenOne))
		assert.False(t, ok, "the entry with a wildcard in its path matches nothing, as in the kubelet")

		g := newFixture(t)
		g.write(t, ecrAnswer(announce.ScopeGlobal, time.Hour, ecrA+"/*"))
		assert.Empty(t, entries(t, g.dir), "no matchImages entry can match: nothing is announced")
	})
	t.Run("nothing to announce", func(t *testing.T) {
		f := newFixture(t)
		a := ecrAnswer(announce.ScopeRegistry, time.Hour)
		a.Auth = map[string]credential.AuthConfig{ecrGlob: {}}
		f.write(t, a)
		assert.Empty(t, entries(t, f.dir))
	})
	t.Run("too many credentials", func(t *testing.T) {
		f := newFixture(t)
		a := ecrAnswer(announce.ScopeRegistry, time.Hour)
		a.Auth = map[string]credential.AuthConfig{}
		for i := 0; i <= announce.MaxCredentials; i++ {
			a.Auth[strings.Repeat("a", i+1)+".example"] = token(tokenOne)
		}
		assert.Error(t, f.writer(t).Write(a))
		assert.Empty(t, entries(t, f.dir))
	})
}

// entries lists the announcement files of dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".json") && !strings.HasPrefix(de.Name(), ".") {
			out = append(out, de.Name())
		}
	}
	return out
}

// TestBoardRefuses: only root (or serve's own user) may announce. A
// directory, parent, key or announcement that someone else owns, that
// others may write (the key: read), that is a symbolic link or not a
// regular file, or that does not decode, counts for nothing and is
// logged; the other announcements still count.
func TestBoardRefuses(t *testing.T) {
	const tenant = 4242
	asRoot := os.Geteuid() == 0
	tests := []struct {
		name     string
		needRoot bool
		mutate   func(t *testing.T, dir, entry string)
		// othersCount: announcements in other files still count.
		othersCount bool
		logged      string
	}{
		{name: "untouched", othersCount: true},
		{name: "entry owned by a tenant", needRoot: true, othersCount: true, logged: "owned by uid 4242",
			mutate: func(t *testing.T, _, entry string) { require.NoError(t, os.Lchown(entry, tenant, tenant)) }},
		{name: "entry writable by others", othersCount: true, logged: "gives others access",
			mutate: func(t *testing.T, _, entry string) { require.NoError(t, os.Chmod(entry, 0o666)) }},
		{name: "entry writable by its group", othersCount: true, logged: "gives others access",
			mutate: func(t *testing.T, _, entry string) { require.NoError(t, os.Chmod(entry, 0o620)) }},
		{name: "entry is a symbolic link", othersCount: true, logged: "a symbolic link",
			mutate: func(t *testing.T, _, entry string) { relink(t, entry) }},
		{name: "entry is a FIFO", othersCount: true, logged: "not a regular file",
			mutate: func(t *testing.T, _, entry string) {
				require.NoError(t, os.Remove(entry))
				require.NoError(t, syscall.Mkfifo(entry, 0o600))
			}},
		{name: "entry is garbage", othersCount: true, logged: "invalid",
			mutate: func(t *testing.T, _, entry string) {
				require.NoError(t, os.WriteFile(entry, []byte(`{"apiVersion":`), 0o600))
			}},
		{name: "entry too large", othersCount: true, logged: "larger than",
			mutate: func(t *testing.T, _, entry string) {
				require.NoError(t, os.WriteFile(entry, []byte(strings.Repeat(" ", announce.MaxFileSize+1)), 0o600))
			}},
		{name: "directory writable by others", logged: "writable by others",
			mutate: func(t *testing.T, dir, _ string) { require.NoError(t, os.Chmod(dir, 0o777)) }},
		{name: "directory owned by a tenant", needRoot: true, logged: "owned by uid 4242",
			mutate: func(t *testing.T, dir, _ string) { require.NoError(t, os.Lchown(dir, tenant, tenant)) }},
		{name: "parent writable by others", logged: "writable by others",
			mutate: func(t *testing.T, dir, _ string) { require.NoError(t, os.Chmod(filepath.Dir(dir), 0o777)) }},
		{name: "key readable by others", logged: "gives others access",
			mutate: func(t *testing.T, dir, _ string) {
				require.NoError(t, os.Chmod(filepath.Join(dir, announce.KeyFile), 0o644))
			}},
		{name: "key owned by a tenant", needRoot: true, logged: "owned by uid 4242",
			mutate: func(t *testing.T, dir, _ string) {
				require.NoError(t, os.Lchown(filepath.Join(dir, announce.KeyFile), tenant, tenant))
			}},
		{name: "key is a symbolic link", logged: "a symbolic link",
			mutate: func(t *testing.T, dir, _ string) { relink(t, filepath.Join(dir, announce.KeyFile)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needRoot && !asRoot {
				t.Skip("needs root to give a file to another user")
			}
			f := newFixture(t)
			f.write(t, ecrAnswer(announce.ScopeRegistry, time.Hour))
			target := filepath.Join(f.dir, entries(t, f.dir)[0])
			f.clock.Step(time.Second)
			other := ecrAnswer(announce.ScopeRegistry, time.Hour)
			other.Auth = map[string]credential.AuthConfig{ecrGlob: token(tokenTwo)}
			f.write(t, other)
			if tt.mutate != nil {
				tt.mutate(t, f.dir, target)
			}
			b := f.board()
			im := image(t, ecrA+"/team/app")
			_, ok := b.Source(im, token(tokenOne))
			assert.Equal(t, tt.mutate == nil, ok, "the touched announcement")
			_, ok = b.Source(im, token(tokenTwo))
			assert.Equal(t, tt.othersCount, ok, "the other announcement")
			if tt.logged == "" {
				assert.Empty(t, f.log.text())
				return
			}
			assert.Contains(t, f.log.text(), tt.logged)
			assert.Contains(t, f.log.text(), "Refusing node credential announcements")
			// Logged once, not at every reading.
			n := strings.Count(f.log.text(), "Refusing")
			require.NoError(t, os.Chtimes(f.dir, time.Now(), time.Now()))
			_, _ = b.Source(im, token(tokenOne))
			assert.Equal(t, n, strings.Count(f.log.text(), "Refusing"))
		})
	}
}

// relink replaces path with a symbolic link to a copy of it.
func relink(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	elsewhere := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(elsewhere, data, 0o600))
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Symlink(elsewhere, path))
}

// TestNoCredentialWritten: the announcement files and the log hold no
// form of the credentials announced.
func TestNoCredentialWritten(t *testing.T) {
	f := newFixture(t)
	secrets := []string{tokenOne, tokenTwo, "AWS:" + tokenOne}
	a := ecrAnswer(announce.ScopeGlobal, time.Hour)
	a.Auth[ecrA] = token(tokenTwo)
	f.write(t, a)
	require.NoError(t, os.Chmod(f.dir, 0o777)) // a refusal, for the log
	_, _ = f.board().Source(image(t, ecrA+"/team/app"), token(tokenOne))
	texts := map[string]string{"log": f.log.text()}
	for _, name := range entries(t, f.dir) {
		data, err := os.ReadFile(filepath.Join(f.dir, name))
		require.NoError(t, err)
		texts[name] = string(data)
	}
	require.Len(t, texts, 2)
	assert.Empty(t, leak.Scan(texts, secrets...))
}

// TestConcurrentWritersAndReaders: writers and a board at once (under
// -race): every write succeeds and each writer's announcement is seen.
func TestConcurrentWritersAndReaders(t *testing.T) {
	f := newFixture(t)
	b := f.board()
	im := image(t, ecrA+"/team/app")
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := announce.NewWriter(f.dir, announce.WithWriterClock(f.clock))
			if err == nil {
				a := ecrAnswer(announce.ScopeRegistry, time.Hour)
				a.Auth = map[string]credential.AuthConfig{ecrGlob: token(tokenOne + strings.Repeat("x", i))}
				err = w.Write(a)
			}
			errs <- err
			_, _ = b.Source(im, token(tokenOne))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := 0; i < n; i++ {
		_, ok := b.Source(im, token(tokenOne+strings.Repeat("x", i)))
		assert.True(t, ok, "writer %d", i)
	}
}
