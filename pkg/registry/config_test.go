package registry_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/pullguard/pullguard/pkg/registry"
)

func TestNewRejectsInvalidConfig(t *testing.T) {
	user := func(n string) registry.User { return registry.User{Name: n, Password: password(n)} }
	tests := []struct {
		name    string
		cfg     registry.Config
		wantErr string
	}{
		{name: "empty user name", cfg: registry.Config{Users: []registry.User{{Password: "x"}}}, wantErr: "users[0]: empty name"},
		{name: "colon in name", cfg: registry.Config{Users: []registry.User{user("a:b")}}, wantErr: `user "a:b": name contains a colon`},
		{name: "reserved name", cfg: registry.Config{Users: []registry.User{user(registry.AdminUser)}}, wantErr: "reserved"},
		{name: "duplicate user", cfg: registry.Config{Users: []registry.User{user(alice), user(alice)}}, wantErr: `user "alice": defined twice`},
		{name: "no password", cfg: registry.Config{Users: []registry.User{{Name: alice}}}, wantErr: "exactly one of password and password hash"},
		{name: "password and hash", cfg: registry.Config{Users: []registry.User{{Name: alice, Password: "x", PasswordHash: "y"}}}, wantErr: "exactly one"},
		{name: "hash not bcrypt", cfg: registry.Config{Users: []registry.User{{Name: alice, PasswordHash: "{SHA}abc"}}}, wantErr: `user "alice": password hash is not a bcrypt hash`},
		{name: "unknown pusher", cfg: registry.Config{Pushers: []string{"ghost"}}, wantErr: `pushers: unknown user "ghost"`},
		{name: "unknown reader", cfg: registry.Config{Repositories: []registry.Repository{{Name: "a", Readers: []string{"ghost"}}}}, wantErr: `repository rule "a": readers: unknown user "ghost"`},
		{name: "unknown writer", cfg: registry.Config{Repositories: []registry.Repository{{Name: "a", Writers: []string{"ghost"}}}}, wantErr: `repository rule "a": writers: unknown user "ghost"`},
		{name: "empty rule", cfg: registry.Config{Repositories: []registry.Repository{{}}}, wantErr: "repositories[0]"},
		{name: "uppercase rule", cfg: registry.Config{Repositories: []registry.Repository{{Name: "Team/app"}}}, wantErr: `rule "Team/app": invalid repository name component "Team"`},
		{name: "glob inside rule", cfg: registry.Config{Repositories: []registry.Repository{{Name: "team-*/app"}}}, wantErr: "invalid repository name component"},
		{name: "bare prefix", cfg: registry.Config{Repositories: []registry.Repository{{Name: "/*"}}}, wantErr: `prefix rule "/*"`},
		{name: "duplicate rule", cfg: registry.Config{Repositories: []registry.Repository{{Name: "a"}, {Name: "a"}}}, wantErr: `repository rule "a": defined twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := registry.New(tt.cfg, registry.WithBcryptCost(bcrypt.MinCost))
			require.ErrorIs(t, err, registry.ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  registry.Option
	}{
		{name: "public address", opt: registry.WithAddr("0.0.0.0:0")},
		{name: "host name", opt: registry.WithAddr("localhost:0")},
		{name: "no port", opt: registry.WithAddr("127.0.0.1")},
		{name: "bcrypt cost", opt: registry.WithBcryptCost(1)},
		{name: "denied status", opt: registry.WithDeniedStatus(http.StatusNotFound)},
		{name: "log size", opt: registry.WithRequestLogSize(-1)},
		{name: "nil writer", opt: registry.WithAccessLog(nil)},
		{name: "nil clock", opt: registry.WithClock(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := registry.New(registry.Config{}, tt.opt)
			assert.ErrorContains(t, err, "invalid registry option")
		})
	}
}

func TestRuleSelection(t *testing.T) {
	cfg := registry.Config{
		Users: []registry.User{{Name: alice, Password: password(alice)}},
		Repositories: []registry.Repository{
			{Name: "*", Public: true},
			{Name: "org/*", AllUsers: true},
			{Name: "org/team/*"},
			{Name: "org/team/open", Public: true},
		},
	}
	r := newRegistry(t, cfg)
	for _, repo := range []string{"lib/x", "org/a", "org/team/b", "org/team/deep/c", "org/team/open"} {
		_, err := r.Push(t.Context(), repo, "v1", mustImage(t, 1))
		require.NoError(t, err)
	}
	tests := []struct {
		repo      string
		anonymous int
		alice     int
	}{
		{repo: "lib/x", anonymous: http.StatusOK, alice: http.StatusOK},                          // "*"
		{repo: "org/a", anonymous: http.StatusUnauthorized, alice: http.StatusOK},                // "org/*"
		{repo: "org/team/b", anonymous: http.StatusUnauthorized, alice: http.StatusUnauthorized}, // "org/team/*" wins over "org/*"
		{repo: "org/team/deep/c", anonymous: http.StatusUnauthorized, alice: http.StatusUnauthorized},
		{repo: "org/team/open", anonymous: http.StatusOK, alice: http.StatusOK}, // exact wins
	}
	for _, tt := range tests {
		t.Run(tt.repo, func(t *testing.T) {
			path := "/v2/" + tt.repo + "/manifests/v1"
			assert.Equal(t, tt.anonymous, call(t, r, http.MethodHead, path, "", "").status, "anonymous")
			assert.Equal(t, tt.alice, call(t, r, http.MethodHead, path, alice, "").status, "alice")
		})
	}
}
