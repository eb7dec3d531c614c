// Package guardedpull holds the one pull that both of pullguard's front ends
// (the image manager of `pullguard run` and the CRI proxy of `pullguard
// serve`) make through a CRI image service, so that the credential tracker
// learns every pull, whatever its outcome; Inventory, the tracker's view
// of a CRI image service's images; and the one prune rule both front ends
// apply when images go (Remove, Prune, PruneList: a record goes with its
// image, unless it was written after the runtime was asked; ErrPrune is
// logged, never a removal's error).
//
// imagemanager and pkg/criproxy pull through it, and they, pkg/podworkers
// and cmd/pullguard list a runtime's images for the tracker with Inventory;
// it depends on credtracker (intents and records), pkg/criruntime
// (redaction, manifest checks, image names) and pkg/credential. Inventory
// lives here, not in pkg/criruntime, so that the runtime package does not
// import the tracker.
//
// A Puller's Pull records the pull's intent durably (nothing is pulled if
// it cannot), asks the runtime to pull with each candidate credential in
// order, checks a pull the runtime reports done with the Verifier ("no
// digest without bytes": the registry must serve, to the same credential,
// the manifest the runtime resolved), and then resolves the intent exactly
// once. For an image the runtime already holds under the name (an
// IfNotPresent pull the caller's presence check hid from the pod, an Always
// pull of a present image), the Verifier is asked first for that present
// image's manifest: served to a credential, it is the proof a pull would end
// with, and the runtime is not asked to pull at all; refused, the attempt
// ends with the registry's answer, without the runtime's pull, which would
// be refused the same (see Puller.Pull). The Verifier's calls of one Pull
// share one time bound (WithVerifyTimeout). The intent is resolved as
// follows:
//
//   - a verified pull is recorded under the image ID the runtime reports,
//     with the credential that pulled it;
//   - a pull the Verifier refused leaves the intent unresolved, so that the
//     name needs verification now (a pull in flight) and after a restart
//     (pulled with no known credential);
//   - a pull that failed, or whose context ended, after the runtime stored
//     an image under the name (one it did not hold under the name before
//     the pull) is recorded as pulled by this node with no known credential,
//     so that it never looks preloaded: every pod verifies;
//   - any other failure resolves the intent.
//
// Errors hold no form of any candidate credential (a runtime's error may
// quote what a registry echoed) and keep what callers branch on: ErrNoIntent,
// ErrUnverified, ErrRefused, the context's errors and a gRPC status code.
package guardedpull
