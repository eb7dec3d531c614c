// Command upstream measures pullguard's credential tracker beside the
// upstream kubelet's image pull manager (k8s.io/kubernetes,
// pkg/kubelet/images/pullmanager), in one process, on the same workloads.
//
// The pull manager is built as the kubelet builds it (kuberuntime's
// NewKubeGenericRuntimeManager with the KubeletEnsureSecretPulledImages gate
// on and the default configuration): a file-system records accessor under a
// kubelet root directory, wrapped in the in-memory write-through cache sized
// for 110 pods (550 pulled records, 220 intents), one lock stripe (parallel
// image pulls off), and the default NeverVerifyPreloadedImages policy.
// pullguard's tracker is opened with credtracker.New and used only through
// its public API.
//
// For each number of records the program writes the same N records into
// both stores (one repository and one pull secret each), then, over several
// rounds, interleaving the two implementations:
//
//   - start-up: opening the store and loading the N records, and the heap
//     each implementation then holds (after a GC), per record;
//   - decisions: an image that is present and a pod that holds the secret
//     that pulled it, with requests drawn uniformly over all N records and
//     over a hot set of 1 024 of them; the harness's own cost (reading the
//     next request and passing it on) is measured with the same loop and
//     subtracted; every answer is checked (a decision that is not "use the
//     image" fails the run, so the path measured is the intended one);
//   - writes: a pull intent and a pulled record, as the kubelet records a
//     pull, for images not yet recorded.
//
// It prints the median of the rounds and their range as Markdown tables.
// The product module never imports k8s.io/kubernetes: this directory is a
// module of its own (see go.mod and replaces.sh).
package main
