package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
)

// pullguard is pullguard's tracker over a state directory, used only
// through the package's public API.
type pullguard struct {
	// pristine holds the store as written with n records; dir gets a copy
	// of it at every round, so that each round starts from the same store.
	pristine, dir string
	n             int
	tr            credtracker.Enabled
	hasher        *credential.Hasher
	// creds is each tenant's credentials, as its pods' keyrings present
	// them; buf and names are reused by request.
	creds [tenants]func() []credential.Credential
	buf   []byte
	names [1]string
}

// newPullguard records n pulls into a new store under pristine, as a node
// records them (an intent, then the pulled record, each a durable
// transaction), and builds the requests for them.
func newPullguard(ctx context.Context, pristine, dir string, n int) (*pullguard, error) {
	tr, err := credtracker.New(ctx, credtracker.Config{Dir: pristine}, nil, credtracker.WithLogger(logr.Discard()))
	if err != nil {
		return nil, fmt.Errorf("failed to create pullguard's store in %s: %w", pristine, err)
	}
	p := &pullguard{pristine: pristine, dir: dir, n: n, hasher: tr.Hasher(), buf: make([]byte, 0, 256)}
	for t := range p.creds {
		creds := []credential.Credential{p.credential(t)}
		p.creds[t] = func() []credential.Credential { return creds }
	}
	for i := range n {
		if err := recordPull(tr, i, p.credential(i)); err != nil {
			tr.Close()
			return nil, err
		}
		if r := p.request(i); r.Image != image(i) || r.ImageRef != imageRef(i) {
			tr.Close()
			return nil, fmt.Errorf("request %d is for %s (%s), want %s (%s)", i, r.Image, r.ImageRef, image(i), imageRef(i))
		}
	}
	if err := tr.Close(); err != nil {
		return nil, fmt.Errorf("failed to close pullguard's store in %s: %w", pristine, err)
	}
	return p, nil
}

func recordPull(tr credtracker.Tracker, i int, cred credential.Credential) error {
	if err := tr.RecordPullIntent(image(i)); err != nil {
		return err
	}
	return tr.RecordImagePulled(image(i), imageRef(i), cred)
}

// credential is the i-th image's tenant's pull secret, hashed with the
// store's node-local key, as the pod's keyring presents it.
func (p *pullguard) credential(i int) credential.Credential {
	s := secretOf(i)
	auth := credential.AuthConfig{Username: s.username, Password: s.password}
	return credential.Credential{
		Registry: registry,
		Auth:     auth,
		Source:   credential.Source{Kind: credential.SourceSecret, Namespace: s.namespace, Name: s.name, UID: s.uid},
		Hash:     p.hasher.Hash(registry, auth),
	}
}

// reset replaces the working directory's store with the pristine one.
func (p *pullguard) reset() error {
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("failed to clear %s: %w", p.dir, err)
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", p.dir, err)
	}
	for _, name := range []string{credtracker.StoreFile, credtracker.HashKeyFile, credtracker.GenerationFile} {
		if err := copyFile(filepath.Join(p.pristine, name), filepath.Join(p.dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// open opens the working store: start-up, as a node starts.
func (p *pullguard) open(ctx context.Context) error {
	tr, err := credtracker.New(ctx, credtracker.Config{Dir: p.dir}, nil, credtracker.WithLogger(logr.Discard()))
	if err != nil {
		return fmt.Errorf("failed to open pullguard's store in %s: %w", p.dir, err)
	}
	if got := tr.Status().Records; got != p.n {
		tr.Close()
		return fmt.Errorf("pullguard's store in %s holds %d records, want %d", p.dir, got, p.n)
	}
	p.tr = tr
	return nil
}

func (p *pullguard) close() error {
	err := p.tr.Close()
	p.tr = nil
	return err
}

// decide asks about count requests of s from index from; it returns how
// many answers were not "use the image: the pod's credential matches".
func (p *pullguard) decide(s stream, from, count int) (bad int) {
	for k := from; k < from+count; k++ {
		d := p.tr.Decide(p.request(int(s[k&(streamLen-1)])))
		if d.Action != credtracker.UseImage || d.Reason != credtracker.ReasonCredentialMatch {
			bad++
		}
	}
	return bad
}

// harness is decide's loop with the tracker replaced by a call that does
// nothing: the cost of reading the next request and passing it on.
func (p *pullguard) harness(s stream, from, count int) (bad int) {
	for k := from; k < from+count; k++ {
		if !pullguardSink(p.request(int(s[k&(streamLen-1)]))) {
			bad++
		}
	}
	return bad
}

// pullguardSink reads what Decide reads of a request that is not the
// tracker's own memory: its strings and its credentials.
//
//go:noinline
func pullguardSink(r credtracker.Request) bool {
	read := int(r.Image[len(r.Image)-1]) + int(r.ImageRef[len(r.ImageRef)-1]) + int(r.Names[0][0]) + int(r.Credentials()[0].Hash[31])
	return read >= 0
}

// request builds the i-th image's request into one reused buffer, as a
// node builds a request from the pod it is starting: its bytes are in the
// cache. (Prebuilding one request per record would put tens of megabytes
// of the harness's own memory between the tracker and the CPU caches at
// 100 000 records.) The request's strings alias the buffer, which the
// next request overwrites: Decide does not retain them on this workload
// (every record already names its secret, so nothing is written).
func (p *pullguard) request(i int) credtracker.Request {
	const hexDigits = "0123456789abcdef"
	b := append(p.buf[:0], registry+"/tenant-"...)
	b = strconv.AppendUint(b, uint64(i%tenants), 10)
	b = append(b, "/app-"...)
	b = strconv.AppendUint(b, uint64(i), 10)
	b = append(b, ":v1"...)
	n := len(b)
	b = append(b, "sha256:000000000000000000000000000000000000000000000000"...) // %064x: 48 zeros, then 16 digits
	v := uint64(i + 1)
	for k := 60; k >= 0; k -= 4 {
		b = append(b, hexDigits[(v>>uint(k))&15])
	}
	s := unsafe.String(unsafe.SliceData(b), len(b))
	p.buf = b
	p.names[0] = s[:n]
	return credtracker.Request{Image: s[:n], ImageRef: s[n:], Names: p.names[:], PullPolicy: corev1.PullIfNotPresent, Credentials: p.creds[i%tenants]}
}

// write records the pull of the (n+k)-th image.
func (p *pullguard) write(k int) error { return recordPull(p.tr, p.n+k, p.credential(p.n+k)) }

// written reports whether the (n+k)-th image is now known with its secret.
func (p *pullguard) written(k int) bool {
	i := p.n + k
	creds := []credential.Credential{p.credential(i)}
	d := p.tr.Decide(credtracker.Request{
		Image: image(i), PullPolicy: corev1.PullIfNotPresent, ImageRef: imageRef(i), Names: []string{image(i)},
		Credentials: func() []credential.Credential { return creds },
	})
	return d.Action == credtracker.UseImage
}

// refuses reports whether a pod holding another tenant's secret (not the
// one that pulled the i-th image) must pull it.
func (p *pullguard) refuses(i int) bool {
	creds := []credential.Credential{p.credential(i + 1)}
	d := p.tr.Decide(credtracker.Request{
		Image: image(i), PullPolicy: corev1.PullIfNotPresent, ImageRef: imageRef(i), Names: []string{image(i)},
		Credentials: func() []credential.Credential { return creds },
	})
	return d.Action == credtracker.Pull && d.Reason == credtracker.ReasonNoMatch
}

// diskBytes is the size of the store file holding the n records.
func (p *pullguard) diskBytes() (int64, error) {
	fi, err := os.Stat(filepath.Join(p.pristine, credtracker.StoreFile))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func copyFile(from, to string) (err error) {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("failed to open %s: %w", from, err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", to, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("failed to close %s: %w", to, cerr)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("failed to copy %s to %s: %w", from, to, err)
	}
	// Flush it now, or the first durable write would pay for the copy.
	if err := out.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", to, err)
	}
	return nil
}
