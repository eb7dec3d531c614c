package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/pullguard/pullguard/credtracker"
)

// socketDir is a directory for sockets (their paths are limited to 107
// bytes; t.TempDir's can be longer), removed at the end of the test.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgadmin")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestAdminSocketPeers: serve's admin socket answers root only, whatever
// the socket's mode lets connect (the peer's uid from SO_PEERCRED, faked
// here: the test runs as root), and says when it holds no store.
func TestAdminSocketPeers(t *testing.T) {
	cases := []struct {
		name       string
		peerUID    func(net.Conn) (uint32, error)
		protecting bool
		wantErr    string
		wantIs     error
	}{
		{name: "a peer that is not root", peerUID: func(net.Conn) (uint32, error) { return 1000, nil }, protecting: true,
			wantErr: "answered 403 Forbidden: only root may read the records"},
		{name: "a peer whose credentials cannot be read", peerUID: func(net.Conn) (uint32, error) { return 0, errors.New("no credentials") }, protecting: true,
			wantErr: "answered 403 Forbidden: only root may read the records"},
		{name: "root, by SO_PEERCRED, with the protection off", protecting: false, wantIs: errServeHoldsNoStore},
		{name: "root, by SO_PEERCRED, with a tracker that cannot be read while it runs", protecting: true,
			wantErr: "answered 500 Internal Server Error: the credential tracker cannot be read while it runs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := socketDir(t)
			socket := filepath.Join(dir, "admin.sock")
			stop, err := serveAdmin(socket, &adminServer{rootDir: dir, tracker: credtracker.Disabled(), protecting: tc.protecting,
				logger: ktesting.NewLogger(t, ktesting.NewConfig()), peerUID: tc.peerUID})
			require.NoError(t, err)
			t.Cleanup(stop)

			_, root, err := fetchRecords(context.Background(), socket)
			require.Error(t, err)
			if tc.wantIs != nil {
				assert.ErrorIs(t, err, tc.wantIs)
				assert.Equal(t, dir, root, "serve names its root directory")
			} else {
				assert.Contains(t, err.Error(), tc.wantErr)
			}
		})
	}
}

// TestAdminSocketAbsent: an absent socket, or one nobody answers on, is
// no serve: records then reads the store itself.
func TestAdminSocketAbsent(t *testing.T) {
	dir := socketDir(t)
	_, _, err := fetchRecords(context.Background(), filepath.Join(dir, "absent.sock"))
	assert.ErrorIs(t, err, errNoServe, "absent")

	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	_, _, err = fetchRecords(context.Background(), stale)
	assert.ErrorIs(t, err, errNoServe, "a socket left by a serve that is gone refuses connections")
}

// TestAdminSocketServeNotAnswering: a serve that accepts the connection
// and never answers fails records at the deadline, saying so; it is not
// taken for an absent serve.
func TestAdminSocketServeNotAnswering(t *testing.T) {
	dir := socketDir(t)
	socket := filepath.Join(dir, "stuck.sock")
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c // held open, never answered
		}
	}()
	t.Cleanup(func() {
		l.Close()
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	})
	old := adminHeaderTimeout
	adminHeaderTimeout = 200 * time.Millisecond
	t.Cleanup(func() { adminHeaderTimeout = old })

	_, _, err = fetchRecords(context.Background(), socket)
	require.Error(t, err)
	assert.NotErrorIs(t, err, errNoServe)
	assert.Contains(t, err.Error(), "serve's admin socket "+socket+" did not answer")
	assert.Contains(t, err.Error(), "timeout awaiting response headers")
}

// TestStreamRecordsDoc: the document serve streams, a record at a time,
// decodes into the one newRecordsDoc builds; one cut short by an error
// does not decode.
func TestStreamRecordsDoc(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	recs := []credtracker.ImageRecord{
		{ImageRef: "sha256:aaaa", Updated: at, Repositories: map[string]*credtracker.RepositoryRecord{
			"registry.example/team/app": {NodeAccessible: true, Updated: at},
		}},
		{ImageRef: "sha256:bbbb", UnknownOrigin: "record unreadable: bad", Updated: at, Repositories: map[string]*credtracker.RepositoryRecord{}},
	}
	st := credtracker.Status{Records: 2, Intents: 1, UnreadableRecords: 1}
	intents := []credtracker.PendingIntent{{Image: "registry.example/team/other:v1", Since: at}}
	want := newRecordsDoc(recs, st, intents)

	cases := []struct {
		name    string
		recs    []credtracker.ImageRecord
		fail    error
		wantDoc *recordsDoc
	}{
		{name: "records", recs: recs, wantDoc: &want},
		{name: "no record", wantDoc: func() *recordsDoc { d := newRecordsDoc(nil, st, intents); return &d }()},
		{name: "cut short", recs: recs, fail: errors.New("client gone")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := streamRecordsDoc(&buf, newRecordsDoc(nil, st, intents), func(fn func(credtracker.ImageRecord) error) error {
				for i, r := range tc.recs {
					if tc.fail != nil && i == 1 {
						return tc.fail
					}
					if err := fn(r); err != nil {
						return err
					}
				}
				return nil
			})
			var got recordsDoc
			decodeErr := json.NewDecoder(&buf).Decode(&got)
			if tc.wantDoc == nil {
				assert.ErrorIs(t, err, tc.fail)
				assert.Error(t, decodeErr, "a document cut short never decodes")
				return
			}
			require.NoError(t, err)
			require.NoError(t, decodeErr)
			assert.Equal(t, *tc.wantDoc, got)
		})
	}
}
