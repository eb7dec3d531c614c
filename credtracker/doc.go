// Package credtracker holds the credential tracker: which credentials
// successfully pulled each image, and the decision whether a pod may use an
// image that is already present without proving to the registry that it may
// read it (KEP-2535, "ensure secret pulled images").
//
// The image manager and the CRI proxy (pkg/criproxy) ask it, the guarded
// pull (pkg/guardedpull) records in it, pkg/nodeconfig reads its policy and
// allowlist types, pkg/podworkers and cmd/pullguard open it, and
// cmd/pullguard shows its records. It depends on pkg/credential (the keyed
// hash), pkg/imageref, bbolt and the kubelet's configuration types, and on
// no other pullguard package (docs/imports.txt).
//
// Records are kept per image ref (the runtime's image ID) and per
// repository name, and hold only keyed hashes of credentials and the
// coordinates of where they came from (a Secret's or ServiceAccount's
// namespace, name and uid), never credential material. They are stored in
// an embedded bbolt database, written with one fsynced transaction per
// change, and served from memory. A decision reads the records without a
// lock and reads no disk, with two exceptions: when no record names the
// image under the pod's name it reads the pulls in flight under intentMu,
// a small lock never held across I/O; and when it admits a pull secret
// by its hash while the record does not list that secret's coordinates
// yet (once per secret and image), it writes them (rememberCoordinates:
// under writeMu, one fsynced transaction), so that a later rotation of the
// secret is honoured.
//
// The store records its schema version, read before anything else in it
// (schema.go): a store written by a newer pullguard is refused, unchanged
// (New fails with ErrStoreTooNew), and an older one is migrated in one
// transaction.
//
// Every pull is preceded by a durable pull intent; an intent left behind
// by a crash becomes, at the next start, a record with no known credentials
// for the image it names, so the next pod must verify. A store or record
// that cannot be read is never trusted: the tracker fails safe, requiring
// verification, and says so in its logs, metrics and Status.
//
// The decision rules are those of the pullguard design (section 3); see
// Tracker.Decide and docs/decision-matrix.md.
package credtracker
