// Command pullguard holds pullguard's command line: run, serve, records,
// doctor, install, uninstall, demo, registry, and credential-provider (the kubelet's
// credential provider plugins run through pullguard). It plays the kubelet's part for images on a node: it
// ensures pods' images with the KubeletEnsureSecretPulledImages protection,
// so that an image pulled with one tenant's credentials is never handed to
// another tenant's pod that cannot prove access to it.
//
// run and demo assemble a node with pkg/podworkers (configured by
// pkg/nodeconfig), records reads the credential tracker's store, serve
// serves pkg/criproxy in front of a runtime opened with pkg/criruntime,
// doctor checks a node's kubelet settings and serve, install and uninstall
// set a node up and take it back with pkg/nodeinstall, and
// demo and registry start pkg/registry; output formats, logs, version and
// metrics come from k8s.io/component-base. Nothing imports it.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/component-base/version/verflag"
)

func main() {
	os.Exit(execute(newRootCommand()))
}

// execute runs the command and returns the process's exit code: 0, 1 for
// an error, 128+n for a run stopped by signal n (130 for SIGINT, 143 for
// SIGTERM), as shells report a process killed by it.
func execute(root *cobra.Command) int {
	defer logs.FlushLogs()
	err := root.Execute()
	var stopped *stoppedError
	var plugin *pluginStatus
	switch {
	case err == nil, errors.Is(err, errVersionPrinted):
		return 0
	case errors.As(err, &plugin):
		// credential-provider ends as its plugin did; the plugin's stderr
		// said why.
		logs.FlushLogs()
		return plugin.exit()
	case errors.As(err, &stopped):
		fmt.Fprintln(os.Stderr, "pullguard:", sanitize(err.Error()))
		return stopped.code()
	default:
		fmt.Fprintln(os.Stderr, "Error:", sanitize(err.Error()))
		return 1
	}
}

func newRootCommand() *cobra.Command {
	logging := logsapi.NewLoggingConfiguration()
	root := &cobra.Command{
		Use:   "pullguard",
		Short: "Ensure images for pods the way a kubelet does, without handing one tenant's private images to another",
		Long: `pullguard is the kubelet's "ensure secret pulled images" protection (KEP-2535).

It remembers, as keyed hashes only, which credentials pulled each image. A pod
that presents the same credentials uses a present image with no registry
contact; any other pod must prove access: IfNotPresent pods re-pull (only the
manifest is fetched, so the registry decides) and Never pods fail with
ErrImageNeverPull.`,
		Example: `  pullguard demo
  pullguard run -f pods.yaml -o wide
  pullguard records
  pullguard --version`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := printVersionIfRequested(cmd.OutOrStdout()); err != nil || versionRequested() {
				if err == nil {
					err = errVersionPrinted
				}
				return err
			}
			// Logs as the kubelet's: --logging-format, -v, --vmodule.
			return logsapi.ValidateAndApply(logging, nil)
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	logsapi.AddFlags(logging, root.PersistentFlags())
	// Alpha options that need a feature gate pullguard does not have.
	for _, name := range []string{"log-json-info-buffer-size", "log-json-split-stream", "log-text-info-buffer-size", "log-text-split-stream"} {
		_ = root.PersistentFlags().MarkHidden(name)
	}
	verflag.AddFlags(root.PersistentFlags())
	root.AddCommand(newRunCommand(), newRecordsCommand(), newDemoCommand(), newRegistryCommand(), newServeCommand(), newDoctorCommand(), newConfigCommand(), newCredentialProviderCommand(), newInstallCommand(), newUninstallCommand(), newNodeAgentCommand())
	return root
}
