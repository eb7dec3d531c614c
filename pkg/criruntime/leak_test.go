package criruntime_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// TestRegistryEchoingCredentialsLeaksNothing: a registry that echoes what
// it was sent in its error text, in every encoding, gets none of it into
// the pull's error or the runtime's log at the highest verbosity, for each
// way a credential can be given.
func TestRegistryEchoingCredentialsLeaksNothing(t *testing.T) {
	const pw = `pw-echo-"K7/+&%q`
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		if h == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="echo"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		user, pass, _ := r.BasicAuth()
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "Basic "))
		j, _ := json.Marshal(pass)
		msg := "denied " + h + " user=" + user + " pass=" + pass + " raw=" + string(raw) + " json=" + string(j) +
			" url=" + url.QueryEscape(pass) + " b64=" + base64.StdEncoding.EncodeToString([]byte(pass)) +
			" bearer=" + strings.TrimPrefix(h, "Bearer ")
		body, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": "DENIED", "message": msg}}})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write(body)
	}))
	t.Cleanup(echo.Close)
	host := strings.TrimPrefix(echo.URL, "http://")
	authField := base64.StdEncoding.EncodeToString([]byte("alice:" + pw))

	tests := []struct {
		name string
		auth *runtimeapi.AuthConfig
	}{
		{name: "username and password", auth: basic("alice", pw)},
		{name: "auth field", auth: &runtimeapi.AuthConfig{Auth: authField}},
		{name: "registry token", auth: &runtimeapi.AuthConfig{RegistryToken: pw}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var logs strings.Builder
			logger := funcr.New(func(prefix, args string) {
				mu.Lock()
				defer mu.Unlock()
				logs.WriteString(prefix + " " + args + "\n")
			}, funcr.Options{Verbosity: 10})
			e := newEmbedded(t, t.TempDir(), criruntime.WithLogger(logger))

			_, err := e.PullImage(context.Background(), spec(host+"/team-a/app:v1"), tt.auth, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "denied", "the registry's text is kept")
			_, verr := criruntime.VerifyManifest(context.Background(), host+"/team-a/app:v1", tt.auth, nil)
			require.Error(t, verr)

			mu.Lock()
			texts := map[string]string{"pull error": err.Error(), "verify error": verr.Error(), "log": logs.String()}
			mu.Unlock()
			for _, f := range leak.Scan(texts, pw, authField) {
				assert.Fail(t, "a credential got out", "in the %s, as %q", f.Where, f.Form)
			}
		})
	}
}
