package imagemanager_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/internal/leak"
)

// echoCredentials makes a pull fail with what a registry echoed of its
// credentials, in every encoding (containerd passes a registry's error
// text through).
func echoCredentials(_ context.Context, _ *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig) error {
	if auth == nil {
		return errors.New("401 Unauthorized")
	}
	pw := auth.Password
	if pw == "" {
		b, _ := base64.StdEncoding.DecodeString(auth.Auth)
		_, pw, _ = strings.Cut(string(b), ":")
	}
	j, _ := json.Marshal(pw)
	return fmt.Errorf("unexpected status from GET request: 403 Forbidden: denied: pass=%s basic=%s json=%s url=%s",
		pw, base64.StdEncoding.EncodeToString([]byte(auth.Username+":"+pw)), j, url.QueryEscape(pw))
}

// TestRuntimeErrorsEchoingCredentialsLeakNothing: events, the returned
// message and the log at the highest verbosity hold no form of any
// password the pod's secrets gave.
func TestRuntimeErrorsEchoingCredentialsLeakNothing(t *testing.T) {
	var mu sync.Mutex
	var logs strings.Builder
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10})
	e := newEnv(t, true, imagemanager.WithLogger(logger))
	e.rt.Hold = echoCredentials
	var err error
	e.m, err = imagemanager.New(e.rt, e.tr, e.rec, imagemanager.WithLogger(logger), imagemanager.WithClock(e.clock))
	require.NoError(t, err)

	res, err := e.ensure(pod("team-a", "app", "regcred", "other"), privImage, corev1.PullIfNotPresent,
		secret("team-a", "regcred", "alice"), secret("team-a", "other", "carol"))
	require.ErrorIs(t, err, imagemanager.ErrImagePull)

	var evs []string
	for {
		select {
		case s := <-e.rec.Events:
			evs = append(evs, s)
			continue
		default:
		}
		break
	}
	mu.Lock()
	texts := map[string]string{"message": res.Message, "events": strings.Join(evs, "\n"), "log": logs.String()}
	mu.Unlock()
	require.Contains(t, texts["events"], "403 Forbidden", "the runtime's text is kept")
	for _, f := range leak.Scan(texts, passwords["alice"], passwords["carol"]) {
		assert.Fail(t, "a password got out", "in the %s, as %q", f.Where, f.Form)
	}
}
