package registry_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/pullguard/pullguard/pkg/registry"
)

// password returns the test password of user. Tests never print it: no
// assertion compares it, and failure messages name users only.
func password(user string) string { return "pw-" + user + "-0123456789" }

// The tenants of the fixture.
const (
	alice  = "alice"  // reads team-a/*
	bob    = "bob"    // reads team-b/app
	carol  = "carol"  // reads team-a/secret only
	writer = "writer" // writes team-a/*
	pusher = "pusher" // pushes everywhere
)

// fixture is the access configuration most tests share.
func fixture() registry.Config {
	users := []registry.User{}
	for _, u := range []string{alice, bob, carol, writer, pusher} {
		users = append(users, registry.User{Name: u, Password: password(u)})
	}
	return registry.Config{
		Users: users,
		Repositories: []registry.Repository{
			{Name: "public/base", Public: true},
			{Name: "team-a/*", Readers: []string{alice}, Writers: []string{writer}},
			{Name: "team-a/secret", Readers: []string{carol}},
			{Name: "team-b/app", Readers: []string{bob}},
			{Name: "shared/app", AllUsers: true},
		},
		Pushers: []string{pusher},
	}
}

// newRegistry starts a registry on a random port, closed at the end of the
// test, with cheap bcrypt so that tests start fast.
func newRegistry(t testing.TB, cfg registry.Config, opts ...registry.Option) *registry.Registry {
	t.Helper()
	opts = append([]registry.Option{registry.WithBcryptCost(bcrypt.MinCost)}, opts...)
	r, err := registry.New(cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}

// seeded pushes one image to each fixture repository and returns them by
// repository; the request log is reset afterwards.
func seeded(t testing.TB, r *registry.Registry) map[string]registry.Pushed {
	t.Helper()
	out := map[string]registry.Pushed{}
	for i, repo := range []string{"public/base", "team-a/app", "team-a/secret", "team-b/app", "shared/app"} {
		img, err := registry.Image(int64(i+1), 2, 256)
		require.NoError(t, err)
		p, err := r.Push(context.Background(), repo, "v1", img)
		require.NoError(t, err, "push %s", repo)
		out[repo] = p
	}
	r.Reset()
	return out
}

// basic returns the ggcr authenticator of user, or Anonymous for "".
func basic(user string) authn.Authenticator {
	if user == "" {
		return authn.Anonymous
	}
	return &authn.Basic{Username: user, Password: password(user)}
}

// call sends one request as user ("" for none) with user's password, or
// with pass when it is not empty, and returns the status, the challenge
// and the error codes of the body.
type result struct {
	status    int
	challenge string
	codes     []string
}

func call(t testing.TB, r *registry.Registry, method, path, user, pass string) result {
	t.Helper()
	req, err := http.NewRequest(method, r.URL()+path, nil)
	require.NoError(t, err)
	if user != "" {
		if pass == "" {
			pass = password(user)
		}
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	res := result{status: resp.StatusCode, challenge: resp.Header.Get("WWW-Authenticate")}
	var e struct {
		Errors []struct {
			Code string `json:"code"`
		} `json:"errors"`
	}
	if resp.StatusCode >= 400 && method != http.MethodHead {
		require.NoError(t, json.Unmarshal(body, &e), "error body of %s %s", method, path)
		for _, x := range e.Errors {
			res.codes = append(res.codes, x.Code)
		}
	}
	return res
}

// bcryptHash returns a bcrypt hash of pw, as htpasswd -B would write it.
func bcryptHash(pw string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	return string(h), err
}

// mustImage returns the small deterministic image of seed.
func mustImage(t testing.TB, seed int64) v1.Image {
	t.Helper()
	img, err := registry.Image(seed, 1, 128)
	require.NoError(t, err)
	return img
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
