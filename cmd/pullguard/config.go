package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
)

// ConfigCheckKind is the kind of `pullguard config check -o json`'s
// document (apiVersion RunAPIVersion).
const ConfigCheckKind = "ConfigCheck"

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check kubelet configuration files as pullguard reads them",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newConfigCheckCommand())
	return cmd
}

// configCheckDoc is config check's -o json document.
type configCheckDoc struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Files      []configCheckFile `json:"files"`
}

type configCheckFile struct {
	File     string   `json:"file"`
	Accepted bool     `json:"accepted"`
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

func newConfigCheckCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "check FILE...",
		Short: "Read each KubeletConfiguration file as the kubelet and run --config read it",
		Long: `check reads each file as a KubeletConfiguration, the way the kubelet and
pullguard run --config read it: strict decoding of the fields pullguard uses
(featureGates, imagePullCredentialsVerificationPolicy,
preloadedImagesVerificationAllowlist, the pull throttle and parallelism) and the
kubelet's validation rules for them. (serve --config reads the same file but
never the kubelet's featureGates: serve's protection is its own.) It prints one line per file, "ok" or the
reason it is refused, and the warnings; the exit status is 1 if any file is
refused. Run it before pointing pullguard at a changed file.

pullguard accepts every file the kubelet v1.36 accepts, and refuses every one
the kubelet refuses for a field pullguard reads (docs/operations.md, "The
policies").`,
		Example: `  pullguard config check /var/lib/kubelet/config.yaml
  pullguard config check -o json a.yaml b.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			if output != formatTable && output != formatJSON {
				return fmt.Errorf("--output must be table or json, not %q", sanitize(output))
			}
			doc := configCheckDoc{APIVersion: RunAPIVersion, Kind: ConfigCheckKind, Files: []configCheckFile{}}
			refused := 0
			for _, f := range files {
				s, err := nodeconfig.LoadSettings(f, nodeconfig.Flags{})
				r := configCheckFile{File: f, Accepted: err == nil, Warnings: s.Warnings}
				if err != nil {
					refused++
					r.Error = err.Error()
				}
				doc.Files = append(doc.Files, r)
			}
			if err := writeConfigCheck(cmd.OutOrStdout(), output, doc); err != nil {
				return err
			}
			if refused > 0 {
				// The reasons are printed above; this sets the exit status.
				return fmt.Errorf("%d of %d configuration files refused", refused, len(files))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", formatTable, "output format: table or json")
	return cmd
}

// writeConfigCheck prints doc: one line per file (and per warning) in a
// table, the document as it is in json. Every message goes through
// sanitize: a file's content may be quoted in a parse error.
func writeConfigCheck(w io.Writer, format string, doc configCheckDoc) error {
	if format == formatJSON {
		for i := range doc.Files {
			doc.Files[i].Error = sanitize(doc.Files[i].Error)
			for j, wn := range doc.Files[i].Warnings {
				doc.Files[i].Warnings[j] = sanitize(wn)
			}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	var b strings.Builder
	for _, f := range doc.Files {
		if f.Accepted {
			fmt.Fprintf(&b, "%s: ok\n", sanitize(f.File))
		} else {
			fmt.Fprintf(&b, "%s: refused: %s\n", sanitize(f.File), oneLine(sanitize(f.Error)))
		}
		for _, wn := range f.Warnings {
			fmt.Fprintf(&b, "%s: warning: %s\n", sanitize(f.File), oneLine(sanitize(wn)))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// oneLine joins a multi-line message into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
