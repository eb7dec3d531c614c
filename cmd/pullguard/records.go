package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

func newRecordsCommand() *cobra.Command {
	var rootDir, output, runtimeEndpoint, adminSocket string
	cmd := &cobra.Command{
		Use:   "records",
		Short: "List what the node remembers about who pulled each image",
		Long: `records lists the credential tracker's records: for each image ref and repository
name, the sources of the credentials that pulled it (secret or service account
namespace/name/uid, with a short prefix of the credential's keyed hash), whether
it is node-accessible (pulled anonymously or with node credentials), and when it
was last updated; then the pull intents not yet resolved and the store's health.
No secret material is stored, so none is shown.

While pullguard serve runs on --root-dir, records asks it, on its admin socket
(--admin-socket, which only root may use): serve has the store open. With no
serve running, records reads the store itself, without changing it; it fails
while a pullguard run holds it, and says so when a serve holds the root
directory but does not answer on the admin socket.

With --runtime, it also lists the images present in that runtime that have no
record: under the default policy they count as preloaded, free to every pod.

A root directory that holds no record store is an error: it is most likely not
the --root-dir of pullguard serve or pullguard run.`,
		Example: `  pullguard records
  pullguard records --root-dir /var/lib/pullguard -o json
  pullguard records --runtime unix:///run/containerd/containerd.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(output); err != nil {
				return err
			}
			doc, err := loadRecordsDoc(cmd.Context(), rootDir, adminSocket)
			if err != nil {
				return err
			}
			if runtimeEndpoint != "" {
				images, err := listRuntime(cmd.Context(), runtimeEndpoint)
				if err != nil {
					return err
				}
				doc.Unrecorded = []unrecordedJSON{}
				for _, img := range unrecorded(images, doc.imageRefs()) {
					doc.Unrecorded = append(doc.Unrecorded, unrecordedJSON{ImageRef: img.Ref, Names: img.Names})
				}
			}
			return writeRecords(cmd.OutOrStdout(), output, doc)
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", defaultRootDir(), "the --root-dir of pullguard serve or pullguard run, which holds the record store")
	cmd.Flags().StringVarP(&output, "output", "o", formatTable, "output format: table, wide, json or yaml")
	cmd.Flags().StringVar(&runtimeEndpoint, "runtime", "", "CRI endpoint of the node's runtime (such as unix:///run/containerd/containerd.sock), to list its images that have no record")
	cmd.Flags().StringVar(&adminSocket, "admin-socket", defaultAdminSocket, `serve's --admin-socket, to ask a running serve; "" reads the store directly (never while serve runs)`)
	return cmd
}

// loadRecordsDoc returns the records document of the store under
// rootDir: from the serve answering on adminSocket when it serves
// rootDir, otherwise read from the store, when no serve holds rootDir.
func loadRecordsDoc(ctx context.Context, rootDir, adminSocket string) (recordsDoc, error) {
	dir := filepath.Join(rootDir, podworkers.TrackerDir)
	if _, err := os.Stat(filepath.Join(dir, credtracker.StoreFile)); err != nil {
		return recordsDoc{}, fmt.Errorf("no record store under %s (%v): is --root-dir the --root-dir of pullguard serve or pullguard run? Either creates it with the protection on", rootDir, err)
	}
	other := "" // the root directory of a serve answering for another one
	if adminSocket != "" {
		doc, served, err := fetchRecords(ctx, adminSocket)
		switch {
		case errors.Is(err, errNoServe):
		case err != nil && !errors.Is(err, errServeHoldsNoStore):
			return recordsDoc{}, err
		case !sameDir(served, rootDir):
			other = served // a serve of another root directory
		case err == nil:
			return doc, nil
		default:
			// serve runs on rootDir with the protection off: it has no
			// store open.
			return readStoreDoc(dir)
		}
	}
	held, err := serveLockHeld(rootDir)
	if err != nil {
		return recordsDoc{}, err
	}
	if held {
		msg := fmt.Sprintf("a pullguard serve holds %s (%s) but ", rootDir, criproxy.LockFile)
		switch {
		case adminSocket == "":
			msg += "--admin-socket is empty"
		case other != "":
			msg += fmt.Sprintf("the serve on the admin socket %s serves %s", adminSocket, other)
		default:
			msg += fmt.Sprintf("does not answer on the admin socket %s (still starting? or started with another --admin-socket?)", adminSocket)
		}
		return recordsDoc{}, errors.New(msg + ": give records that serve's --admin-socket; it does not read a store serve has open")
	}
	return readStoreDoc(dir)
}

// readStoreDoc reads the records document from the store under dir.
func readStoreDoc(dir string) (recordsDoc, error) {
	recs, st, err := credtracker.ReadRecords(dir)
	if err != nil {
		return recordsDoc{}, err
	}
	intents, err := credtracker.ReadIntents(dir)
	if err != nil {
		return recordsDoc{}, err
	}
	return newRecordsDoc(recs, st, intents), nil
}

// sameDir says whether a and b name one directory.
func sameDir(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(fa, fb)
}

// listRuntime lists the images of the runtime at endpoint.
func listRuntime(ctx context.Context, endpoint string) ([]credtracker.Image, error) {
	svc, err := criruntime.NewRemote(ctx, endpoint, criruntime.DefaultRemoteTimeout)
	if err != nil {
		return nil, err
	}
	defer svc.Close(context.WithoutCancel(ctx))
	return guardedpull.Inventory(svc).ListImages(ctx)
}

type recordJSON struct {
	APIVersion    string           `json:"apiVersion"`
	Kind          string           `json:"kind"`
	ImageRef      string           `json:"imageRef"`
	UnknownOrigin string           `json:"unknownOrigin,omitempty"`
	Updated       time.Time        `json:"updated"`
	Repositories  []repositoryJSON `json:"repositories"`
}

type repositoryJSON struct {
	Name            string       `json:"name"`
	NodeAccessible  bool         `json:"nodeAccessible"`
	Updated         time.Time    `json:"updated"`
	Secrets         []sourceJSON `json:"secrets"`
	ServiceAccounts []sourceJSON `json:"serviceAccounts"`
}

type sourceJSON struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       string    `json:"uid"`
	Hash      string    `json:"hash,omitempty"` // a short prefix of the keyed hash
	Verified  time.Time `json:"verified"`
}

type statusJSON struct {
	Records           int        `json:"records"`
	Intents           int        `json:"intents"`
	UnreadableRecords int        `json:"unreadableRecords"`
	RecoveredAt       *time.Time `json:"recoveredAt,omitempty"`
	RecoveryReason    string     `json:"recoveryReason,omitempty"`
	AsidePath         string     `json:"asidePath,omitempty"`
	Degraded          bool       `json:"degraded"`
	// Healthy is false when any of the above asks for attention.
	Healthy bool `json:"healthy"`
}

// recordsDoc is the -o json|yaml document of `pullguard records`.
type recordsDoc struct {
	Status  statusJSON   `json:"status"`
	Records []recordJSON `json:"records"`
	// PendingIntents are the images whose pull started and has not been
	// resolved (a pull in flight, or one a crash interrupted).
	PendingIntents []string `json:"pendingIntents"`
	// Intents are the same, each with when its pull started.
	Intents []intentJSON `json:"intents"`
	// Unrecorded are the runtime's images with no record (only with
	// --runtime).
	Unrecorded []unrecordedJSON `json:"unrecorded,omitempty"`
}

type intentJSON struct {
	Image string `json:"image"`
	// Since is when the pull started; absent for an intent written by a
	// pullguard that did not record it.
	Since *time.Time `json:"since,omitempty"`
}

// imageRefs are the image refs doc has a record of.
func (doc recordsDoc) imageRefs() map[string]bool {
	refs := make(map[string]bool, len(doc.Records))
	for _, r := range doc.Records {
		refs[r.ImageRef] = true
	}
	return refs
}

type unrecordedJSON struct {
	ImageRef string   `json:"imageRef"`
	Names    []string `json:"names"`
}

func toJSON(r credtracker.ImageRecord) recordJSON {
	out := recordJSON{APIVersion: credtracker.APIVersion, Kind: "ImagePulledRecord", ImageRef: r.ImageRef, UnknownOrigin: r.UnknownOrigin, Updated: r.Updated, Repositories: []repositoryJSON{}}
	names := make([]string, 0, len(r.Repositories))
	for n := range r.Repositories {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rr := r.Repositories[n]
		repo := repositoryJSON{Name: n, NodeAccessible: rr.NodeAccessible, Updated: rr.Updated, Secrets: []sourceJSON{}, ServiceAccounts: []sourceJSON{}}
		for _, s := range rr.Secrets {
			repo.Secrets = append(repo.Secrets, sourceJSON{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Hash: s.Hash.String(), Verified: s.Verified})
		}
		for _, sa := range rr.ServiceAccounts {
			repo.ServiceAccounts = append(repo.ServiceAccounts, sourceJSON{Namespace: sa.Namespace, Name: sa.Name, UID: sa.UID, Verified: sa.Verified})
		}
		out.Repositories = append(out.Repositories, repo)
	}
	return out
}

func newRecordsDoc(recs []credtracker.ImageRecord, st credtracker.Status, intents []credtracker.PendingIntent) recordsDoc {
	doc := recordsDoc{Records: []recordJSON{}, PendingIntents: []string{}, Intents: []intentJSON{}}
	for _, in := range intents {
		doc.PendingIntents = append(doc.PendingIntents, in.Image)
		j := intentJSON{Image: in.Image}
		if !in.Since.IsZero() {
			since := in.Since
			j.Since = &since
		}
		doc.Intents = append(doc.Intents, j)
	}
	doc.Status = statusJSON{Records: st.Records, Intents: st.Intents, UnreadableRecords: st.UnreadableRecords, RecoveryReason: st.RecoveryReason, AsidePath: st.AsidePath, Degraded: st.Degraded}
	if !st.RecoveredAt.IsZero() {
		doc.Status.RecoveredAt = &st.RecoveredAt
	}
	doc.Status.Healthy = st.RecoveredAt.IsZero() && !st.Degraded && st.UnreadableRecords == 0
	for _, r := range recs {
		doc.Records = append(doc.Records, toJSON(r))
	}
	return doc
}

func writeRecords(w io.Writer, format string, doc recordsDoc) error {
	if structured, err := writeStructured(w, format, doc); structured {
		return err
	}
	wide := format == formatWide
	width := fitWidth(w, format)
	st := doc.Status
	if st.RecoveredAt != nil {
		fmt.Fprintln(w, sanitize(fmt.Sprintf("WARNING: the record store was unreadable and rebuilt at %s (%s); the old store is kept at %s.", st.RecoveredAt.Format(time.RFC3339), st.RecoveryReason, st.AsidePath)))
	}
	if st.Degraded {
		fmt.Fprintln(w, "WARNING: the rebuilt store could not be seeded from the runtime yet: every present image requires verification.")
	}
	if st.UnreadableRecords > 0 {
		fmt.Fprintf(w, "WARNING: %d records could not be read; their images require verification under every name.\n", st.UnreadableRecords)
	}
	health := "healthy"
	if !st.Healthy {
		health = "needs attention (see the warnings above)"
	}
	fmt.Fprintf(w, "Store: %s; %d records, %d pending pull intents.\n", health, st.Records, len(doc.PendingIntents))
	if len(doc.Records) == 0 {
		fmt.Fprintln(w, "No records.")
	} else {
		t := &table{cols: []column{{header: "IMAGE REF", min: 19}, {header: "REPOSITORY", min: 16}, {header: "ACCESS", min: 30, cutEnd: true}, {header: "UPDATED"}}}
		for _, r := range doc.Records {
			ref := r.ImageRef
			if !wide {
				ref = shortRef(ref)
			}
			if r.UnknownOrigin != "" {
				t.add(ref, "(any other name)", "must verify: "+r.UnknownOrigin, r.Updated.Format(time.RFC3339))
			}
			for _, repo := range r.Repositories {
				t.add(ref, repo.Name, access(repo, wide), repo.Updated.Format(time.RFC3339))
			}
		}
		if err := t.write(w, width); err != nil {
			return err
		}
	}
	if len(doc.PendingIntents) > 0 {
		fmt.Fprintln(w, "\nPENDING PULL INTENTS (each image needs verification under every name until resolved)")
		t := &table{cols: []column{{header: "IMAGE", min: 20}, {header: "SINCE", min: 20}}}
		for _, i := range doc.Intents {
			since := "unknown"
			if i.Since != nil {
				since = i.Since.UTC().Format(time.RFC3339)
			}
			t.add(i.Image, since)
		}
		if err := t.write(w, width); err != nil {
			return err
		}
	}
	if doc.Unrecorded != nil {
		if len(doc.Unrecorded) == 0 {
			fmt.Fprintln(w, "\nEvery image in the runtime has a record.")
			return nil
		}
		fmt.Fprintf(w, "\nIMAGES WITHOUT A RECORD (%d): %s.\n", len(doc.Unrecorded), unrecordedRemedy)
		t := &table{cols: []column{{header: "IMAGE REF", min: 19}, {header: "NAMES", min: 20, cutEnd: true}}}
		for _, u := range doc.Unrecorded {
			ref := u.ImageRef
			if !wide {
				ref = shortRef(ref)
			}
			t.add(ref, orDash(strings.Join(u.Names, ", ")))
		}
		return t.write(w, width)
	}
	return nil
}

func access(r repositoryJSON, wide bool) string {
	if r.NodeAccessible {
		return "node-accessible"
	}
	var parts []string
	for _, s := range r.Secrets {
		if wide {
			parts = append(parts, fmt.Sprintf("secret %s/%s (uid %s, hash %s)", s.Namespace, s.Name, s.UID, s.Hash))
		} else {
			parts = append(parts, fmt.Sprintf("secret %s/%s (hash %s)", s.Namespace, s.Name, s.Hash))
		}
	}
	for _, sa := range r.ServiceAccounts {
		if wide {
			parts = append(parts, fmt.Sprintf("serviceaccount %s/%s (uid %s)", sa.Namespace, sa.Name, sa.UID))
		} else {
			parts = append(parts, fmt.Sprintf("serviceaccount %s/%s", sa.Namespace, sa.Name))
		}
	}
	if len(parts) == 0 {
		return "must verify: no known credential"
	}
	return strings.Join(parts, "; ")
}

func shortRef(ref string) string {
	if strings.HasPrefix(ref, "sha256:") && len(ref) > 19 {
		return ref[:19]
	}
	return ref
}
