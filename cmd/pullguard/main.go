// Command pullguard plays the kubelet's part for images on a node: it
// ensures pods' images with the KubeletEnsureSecretPulledImages protection,
// so that an image pulled with one tenant's credentials is never handed to
// another tenant's pod that cannot prove access to it.
package main

import (
	goflag "flag"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "pullguard",
		Short: "Ensure images for pods the way a kubelet does, without handing one tenant's private images to another",
		Long: `pullguard is the kubelet's "ensure secret pulled images" protection (KEP-2535).

It remembers, as keyed hashes only, which credentials pulled each image. A pod
that presents the same credentials uses a present image with no registry
contact; any other pod must prove access: IfNotPresent pods re-pull (only the
manifest is fetched, so the registry decides) and Never pods fail with
ErrImageNeverPull.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// klog's verbosity, as the kubelet names it.
	fs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(fs)
	root.PersistentFlags().AddGoFlag(fs.Lookup("v"))
	root.PersistentFlags().AddGoFlag(fs.Lookup("vmodule"))

	root.AddCommand(newRunCommand(), newRecordsCommand(), newDemoCommand(), newServeCommand())
	return root
}
