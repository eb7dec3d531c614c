package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/node"
)

func newRecordsCommand() *cobra.Command {
	var rootDir, output string
	cmd := &cobra.Command{
		Use:   "records",
		Short: "List what the node remembers about who pulled each image",
		Long: `records lists the credential tracker's records: for each image ref and repository
name, the sources of the credentials that pulled it (secret or service account
namespace/name/uid, with a short prefix of the credential's keyed hash), whether
it is node-accessible (pulled anonymously or with node credentials), and when it
was last updated. No secret material is stored, so none is shown.

It reads the store without changing it; it fails while another pullguard holds it.`,
		Example: `  pullguard records --root-dir ./pullguard-state
  pullguard records -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("--output must be table or json, not %q", output)
			}
			recs, st, err := credtracker.ReadRecords(filepath.Join(rootDir, node.TrackerDir))
			if err != nil {
				return err
			}
			if output == "json" {
				return writeRecordsJSON(cmd.OutOrStdout(), recs, st)
			}
			writeRecordsTable(cmd.OutOrStdout(), recs, st)
			return nil
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", "./pullguard-state", "the root directory given to pullguard run")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
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

func writeRecordsJSON(w io.Writer, recs []credtracker.ImageRecord, st credtracker.Status) error {
	doc := struct {
		Status  statusJSON   `json:"status"`
		Records []recordJSON `json:"records"`
	}{Records: []recordJSON{}}
	doc.Status = statusJSON{Records: st.Records, Intents: st.Intents, UnreadableRecords: st.UnreadableRecords, RecoveryReason: st.RecoveryReason, AsidePath: st.AsidePath, Degraded: st.Degraded}
	if !st.RecoveredAt.IsZero() {
		doc.Status.RecoveredAt = &st.RecoveredAt
	}
	for _, r := range recs {
		doc.Records = append(doc.Records, toJSON(r))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func writeRecordsTable(w io.Writer, recs []credtracker.ImageRecord, st credtracker.Status) {
	if !st.RecoveredAt.IsZero() {
		fmt.Fprintf(w, "WARNING: the record store was unreadable and rebuilt at %s (%s); the old store is kept at %s.\n", st.RecoveredAt.Format(time.RFC3339), st.RecoveryReason, st.AsidePath)
	}
	if st.Degraded {
		fmt.Fprintln(w, "WARNING: the rebuilt store could not be seeded from the runtime yet: every present image requires verification.")
	}
	if st.UnreadableRecords > 0 {
		fmt.Fprintf(w, "WARNING: %d records could not be read; their images require verification under every name.\n", st.UnreadableRecords)
	}
	if len(recs) == 0 {
		fmt.Fprintln(w, "No records.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE REF\tREPOSITORY\tACCESS\tUPDATED")
	for _, r := range recs {
		j := toJSON(r)
		ref := shortRef(r.ImageRef)
		if r.UnknownOrigin != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ref, "(any other name)", "must verify: "+r.UnknownOrigin, r.Updated.Format(time.RFC3339))
		}
		for _, repo := range j.Repositories {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ref, repo.Name, access(repo), repo.Updated.Format(time.RFC3339))
		}
	}
	tw.Flush()
}

func access(r repositoryJSON) string {
	if r.NodeAccessible {
		return "node-accessible"
	}
	var parts []string
	for _, s := range r.Secrets {
		parts = append(parts, fmt.Sprintf("secret %s/%s (uid %s, hash %s)", s.Namespace, s.Name, s.UID, s.Hash))
	}
	for _, sa := range r.ServiceAccounts {
		parts = append(parts, fmt.Sprintf("serviceaccount %s/%s (uid %s)", sa.Namespace, sa.Name, sa.UID))
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
