// Package nodeagent is what the pod of pullguard's DaemonSet does on its
// node (`pullguard node-agent`): it installs pullguard on the node under
// the host's root file system, one node of the cluster at a time, checks
// the node with doctor, gives the node back when doctor fails, and says
// what it did in a status file (the pod's readiness) and an Event on its
// Pod.
//
// Agent.Install plans the install with pkg/nodeinstall: the pullguard
// binary the pod carries copied onto the node (unless the node's package
// put serve's units there), serve's flags, and serve's kubeconfig
// (ServeKubeconfig: the API server and CA of the kubelet's own
// --kubeconfig, and a ServiceAccount token mounted in the pod). A node
// that has it all already is only checked: nothing is written, nothing
// restarted. Otherwise the agent takes the cluster's Lease (Lease: one
// node at a time, whatever the DaemonSet's rollout does), writes the
// files, and restarts the kubelet through the host's systemd, or serve
// alone when only serve's files changed (a new image), waits for doctor,
// and gives the node back (uninstall, the kubelet restarted) when doctor
// does not pass within the timeout. A kubelet configuration install
// refuses leaves the node untouched. Agent.Uninstall gives the node back,
// one node at a time too.
//
// The agent never touches the node when it is stopped: a pod replaced at
// an image update must not uninstall. A stop in the middle of its work
// leaves the node as it is, and releases the Lease.
package nodeagent
