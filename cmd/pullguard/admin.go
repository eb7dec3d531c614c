package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

// serve's admin socket: `pullguard records` reads the records of a running
// serve through it, as serve has the store open. It is a unix socket of
// mode 0600 in a directory of mode 0750, and serve answers only a peer
// whose uid is 0 (SO_PEERCRED): only root reads it. It is never served
// on the metrics port, which pods with host networking reach.
const (
	defaultAdminSocket = "/run/pullguard/admin.sock"
	adminRecordsPath   = "/v1/records"
	// adminRootDirHeader names serve's --root-dir in an answer.
	adminRootDirHeader = "Pullguard-Root-Dir"
	// adminMaxDocument bounds the records document records reads: far
	// above a node's (10 000 images of 10 records each is about 30 MiB).
	adminMaxDocument = 512 << 20
	// The admin socket's deadlines: serve's to read a request and write
	// an answer, records' to connect, to get the answer's headers and to
	// read all of it.
	adminReadTimeout  = 10 * time.Second
	adminWriteTimeout = 2 * time.Minute
	adminDialTimeout  = 2 * time.Second
	adminTotalTimeout = adminWriteTimeout + 10*time.Second
)

// adminHeaderTimeout is how long records waits for serve's answer to
// begin (a variable for the tests).
var adminHeaderTimeout = 30 * time.Second

// errServeHoldsNoStore is serve's answer when it has no record store open
// (the protection is off): the store is read directly.
var errServeHoldsNoStore = errors.New("serve holds no record store (the protection is off)")

// errNoServe says nothing answers on the admin socket: it is absent, or
// refuses connections.
var errNoServe = errors.New("no serve answers on the admin socket")

// adminServer answers `pullguard records` on the admin socket.
type adminServer struct {
	rootDir string
	tracker credtracker.Tracker
	// protecting is false with the protection off: no store is open.
	protecting bool
	logger     klog.Logger
	// peerUID returns the uid of the process at the other end of a
	// connection (SO_PEERCRED; the tests fake it).
	peerUID func(net.Conn) (uint32, error)
}

type connKey struct{}

// serveAdmin listens on socket (ListenPrivate: 0600, its directory 0750)
// and answers the records document there until the returned func is
// called.
func serveAdmin(socket string, a *adminServer) (stop func(), err error) {
	l, err := criproxy.ListenPrivate(socket)
	if err != nil {
		return nil, fmt.Errorf("--admin-socket: %w", err)
	}
	if a.peerUID == nil {
		a.peerUID = unixPeerUID
	}
	srv := &http.Server{
		Handler:           a,
		ReadHeaderTimeout: adminReadTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.logger.Error(err, "The admin socket stopped", "socket", socket)
		}
	}()
	a.logger.Info("Serving the records on the admin socket", "socket", socket)
	return func() { _ = srv.Close(); _ = l.Close() }, nil
}

// ServeHTTP answers GET /v1/records with the records document, as JSON,
// to root only.
func (a *adminServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	uid, err := a.peerUID(c)
	if err != nil || uid != 0 {
		a.logger.Info("Refused a client of the admin socket that is not root", "uid", uid, "err", err)
		http.Error(w, "only root may read the records", http.StatusForbidden)
		return
	}
	if r.URL.Path != adminRecordsPath {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set(adminRootDirHeader, a.rootDir)
	if !a.protecting {
		http.Error(w, errServeHoldsNoStore.Error(), http.StatusConflict)
		return
	}
	live, ok := a.tracker.(credtracker.LiveInspector)
	if !ok {
		http.Error(w, "the credential tracker cannot be read while it runs", http.StatusInternalServerError)
		return
	}
	st := a.tracker.Status()
	intents, err := live.PendingIntents()
	if err != nil {
		a.logger.Error(err, "Failed to list the pull intents for the admin socket")
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := streamRecordsDoc(w, newRecordsDoc(nil, st, intents), live.EachRecord); err != nil {
		// The answer is cut short: records fails to decode it.
		a.logger.V(2).Info("Failed to send the records", "err", err)
	}
}

// streamRecordsDoc writes doc, as JSON that decodes into a recordsDoc,
// with the records each calls fn with, one at a time (doc's own records
// are not written): serve never holds the document, nor a copy of every
// record, however many images the node has.
func streamRecordsDoc(w io.Writer, doc recordsDoc, each func(func(credtracker.ImageRecord) error) error) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	parts := []struct {
		key   string
		value any
	}{{"status", doc.Status}, {"pendingIntents", doc.PendingIntents}, {"intents", doc.Intents}}
	for i, p := range parts {
		sep := ","
		if i == 0 {
			sep = "{"
		}
		fmt.Fprintf(bw, "%s%q:", sep, p.key)
		if err := enc.Encode(p.value); err != nil {
			return err
		}
	}
	bw.WriteString(`,"records":[`)
	first := true
	err := each(func(r credtracker.ImageRecord) error {
		if !first {
			bw.WriteByte(',')
		}
		first = false
		return enc.Encode(toJSON(r))
	})
	if err != nil {
		return err
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// fetchRecords asks the serve answering on socket for its records
// document, and returns it with serve's root directory. It fails with
// errNoServe when the socket is absent or refuses connections, and with
// errServeHoldsNoStore when serve has no store open.
func fetchRecords(ctx context.Context, socket string) (recordsDoc, string, error) {
	var doc recordsDoc
	dialer := &net.Dialer{Timeout: adminDialTimeout}
	client := &http.Client{
		Timeout: adminTotalTimeout,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, "unix", socket)
			},
			ResponseHeaderTimeout: adminHeaderTimeout,
			DisableKeepAlives:     true,
		},
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://pullguard"+adminRecordsPath, nil)
	if err != nil {
		return doc, "", err
	}
	resp, err := client.Do(req)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED):
		return doc, "", fmt.Errorf("%w (%s): %w", errNoServe, socket, err)
	case errors.Is(err, os.ErrPermission):
		return doc, "", fmt.Errorf("only root may read the records of a running serve (admin socket %s): %w", socket, err)
	case err != nil:
		return doc, "", fmt.Errorf("serve's admin socket %s did not answer: %w", socket, err)
	}
	defer resp.Body.Close()
	root := resp.Header.Get(adminRootDirHeader)
	body := boundedread.NewReader(resp.Body, adminMaxDocument)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		return doc, root, errServeHoldsNoStore
	default:
		msg, _ := io.ReadAll(io.LimitReader(body, 4096))
		return doc, root, fmt.Errorf("serve on %s answered %s: %s", socket, resp.Status, sanitize(strings.TrimSpace(string(msg))))
	}
	if err := json.NewDecoder(body).Decode(&doc); err != nil {
		return doc, root, fmt.Errorf("failed to read the records from serve on %s: %w", socket, err)
	}
	return doc, root, nil
}

// serveLockHeld says whether a pullguard serve holds rootDir's lock. It
// takes the lock shared for a moment, and never creates it.
func serveLockHeld(rootDir string) (bool, error) {
	path := filepath.Join(rootDir, criproxy.LockFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to open %s: %w", path, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return true, nil
		}
		return false, fmt.Errorf("failed to check the lock %s: %w", path, err)
	}
	return false, nil // closing f releases it
}
