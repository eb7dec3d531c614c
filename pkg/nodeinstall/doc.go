// Package nodeinstall sets a node up for pullguard serve and takes it back:
// what `pullguard install` and `pullguard uninstall` do.
//
// It finds the kubelet as systemd starts it (Discover): kubelet.service and
// its drop-ins from systemd's unit directories, read with go-systemd's unit
// parser, the environment they set (Environment=, EnvironmentFile= such as
// kubeadm's kubeadm-flags.env and /etc/default/kubelet) and the flags of the
// expanded command line: --config, --config-dir, the runtime and image
// endpoints, the credential-provider flags and --root-dir. ReadFlagsFiles
// is the reader of the flags files alone, which doctor uses.
//
// PlanInstall turns that into files: serve's units and the kubelet's
// systemd drop-in (from package deploy, unless the node's package put them
// under /usr/lib/systemd/system), a drop-in of serve's unit giving it the
// kubelet's files and runtime, and the kubelet settings serve needs: a
// file in the kubelet's --config-dir; on a kubelet 1.31 or later without
// one, a --config-dir added to its flags and that file; otherwise merged
// into its configuration file, every other byte kept. A configuration
// that does not parse, or whose image service is not serve's, is refused
// (ErrRefused) with its file and line, and nothing is written.
// Options add what a DaemonSet's agent brings: a pullguard binary copied
// onto the node and run by serve (Binary), flags of serve (ServeArgs) and
// more files only serve reads (Files: its kubeconfig, written 0600); all
// recorded for uninstall. A plan that changes serve's files alone
// (Plan.KubeletChanged false, as after a new binary) restarts serve, not
// the kubelet (Restarter.RestartServe).
//
// Install writes a plan: the originals of the files it changes are copied
// under serve's store with a manifest (install/install.json) of every file
// and the hash of what was written, before any file changes; each file is
// then replaced atomically (internal/durable), and a write that fails
// gives back those written before it. Every path is the node's: its
// symbolic links resolve under Options.Root, never out of it.
// PlanUninstall and Uninstall
// give back what the manifest lists, byte for byte, and leave, saying so,
// a file that changed after install. Restarter restarts the kubelet through
// the host's systemd (Systemd, over D-Bus) and waits for the node to be
// ready.
package nodeinstall
