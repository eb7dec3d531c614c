package credtracker

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/pkg/credential"
)

// Decider decides how a container's image is to be ensured.
type Decider interface {
	// Decide applies the decision rules to one container's image. It never
	// fails: when it cannot know, it requires verification. It reads no
	// disk and takes no lock, except to remember the coordinates of a
	// secret admitted by its hash (a write, once per secret and image). It
	// calls req.Credentials at most once, and only when the record lists
	// secrets or service accounts the credentials could match.
	Decide(req Request) Decision
}

// Recorder remembers pulls. Each RecordPullIntent must be matched by
// exactly one RecordImagePulled or RecordImagePullFailed for the same
// image, whatever the outcome of the pull (also on cancellation).
type Recorder interface {
	// RecordPullIntent durably records that image is about to be pulled,
	// before the pull starts. If it fails, the caller must not pull: a
	// pull the node could forget after a crash would make a credential-
	// pulled image look preloaded.
	RecordPullIntent(image string) error
	// RecordImagePulled records that image, now present as imageRef, was
	// pulled with cred (the zero Credential for an anonymous pull), and
	// resolves the intent. The in-memory record is updated even when the
	// write fails, so this process stays safe; the error says the record
	// may not survive a restart.
	RecordImagePulled(image, imageRef string, cred credential.Credential) error
	// RecordImagePullFailed resolves the intent of a pull that failed.
	RecordImagePullFailed(image string) error
}

// Pruner removes what the node no longer needs to remember.
type Pruner interface {
	// PruneImages removes the records of image refs that are not in
	// present, the runtime's image list taken at listedAt (after image
	// garbage collection). Records written at or after listedAt are kept,
	// so a pull that finished after the list was taken is not forgotten.
	PruneImages(present []Image, listedAt time.Time) (removed int, err error)
	// PruneImage removes the record of one image ref that the runtime
	// removed (image garbage collection by image ID), unless it was written
	// at or after removedAt (the time the removal was asked), so a pull
	// that finished meanwhile is not forgotten. Its cost does not depend on
	// the number of records or images; PruneImages catches what it misses.
	PruneImage(imageRef string, removedAt time.Time) (removed bool, err error)
	// ForgetSecret removes the entries of a deleted Secret.
	ForgetSecret(namespace, name, uid string) error
	// ForgetServiceAccount removes the entries of a deleted ServiceAccount.
	ForgetServiceAccount(namespace, name, uid string) error
	// ForgetNamespace removes every secret and service account entry of a
	// deleted namespace.
	ForgetNamespace(namespace string) error
}

// Tracker is the credential tracker: it decides, records and prunes. It is
// safe for concurrent use.
type Tracker interface {
	Decider
	Recorder
	Pruner
	// Records returns a copy of every record, sorted by image ref.
	Records() []ImageRecord
	// Status reports the health of the record store.
	Status() Status
	// Close releases the store. The tracker must not be used afterwards.
	Close() error
}

// ImageInventory lists the images present in the container runtime. The
// tracker uses it at start-up, to resolve leftover pull intents and to
// rebuild a store it could not read.
type ImageInventory interface {
	ListImages(ctx context.Context) ([]Image, error)
}

// ImageInventoryFunc adapts a function to ImageInventory.
type ImageInventoryFunc func(ctx context.Context) ([]Image, error)

// ListImages calls f(ctx).
func (f ImageInventoryFunc) ListImages(ctx context.Context) ([]Image, error) { return f(ctx) }

// Image is one image present in the runtime.
type Image struct {
	// Ref is the runtime's image ID.
	Ref string
	// Names are its repo tags and repo digests, as the runtime reports them.
	Names []string
}

// Request is one container's image to ensure.
type Request struct {
	// Image is the image as the container names it.
	Image string
	// PullPolicy is the container's (defaulted) pull policy.
	PullPolicy corev1.PullPolicy
	// ImageRef is the runtime's ref of the present image, "" if absent.
	ImageRef string
	// Names are the present image's names in the runtime (its repo tags
	// and repo digests). An image the node pulled under other names is
	// free to a pod only if the pod names it by one of its own names, not
	// by its image ID or a name the runtime does not list.
	Names []string
	// Credentials returns the credentials the pod can present for Image
	// (only their Source and Hash are used). It may be nil.
	Credentials func() []credential.Credential
}

// Action is what the caller must do.
type Action uint8

const (
	// UseImage: start the container with the present image, with no
	// registry contact.
	UseImage Action = iota + 1
	// Pull: pull the image with the pod's credentials (for a present image
	// this fetches only the manifest: the registry decides).
	Pull
	// FailNeverPull: fail the container with ErrImageNeverPull, with the
	// same message whether the image is absent or present, so the pod
	// cannot learn that it exists.
	FailNeverPull
)

func (a Action) String() string {
	switch a {
	case UseImage:
		return "use"
	case Pull:
		return "pull"
	case FailNeverPull:
		return "never_pull"
	}
	return "unknown"
}

// Reason says why a Decision was made. Its String values are the metric
// labels and what logs and the command line show.
type Reason uint8

// The reasons.
const (
	ReasonAlways Reason = iota + 1
	ReasonAbsent
	ReasonFeatureDisabled
	ReasonPolicyNeverVerify
	ReasonPreloaded
	ReasonAllowlisted
	ReasonNotAllowlisted
	ReasonAlwaysVerify
	ReasonNodeAccessible
	ReasonCredentialMatch
	ReasonSecretRotated
	ReasonServiceAccount
	ReasonNoMatch
	ReasonExpired
	ReasonPullInFlight
	ReasonUnknownOrigin
	ReasonRecordsUnreadable
	ReasonInvalidImageName
	ReasonUnlistedName
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonAlways:            "pull_policy_always",
	ReasonAbsent:            "image_absent",
	ReasonFeatureDisabled:   "feature_disabled",
	ReasonPolicyNeverVerify: "policy_never_verify",
	ReasonPreloaded:         "preloaded",
	ReasonAllowlisted:       "allowlisted",
	ReasonNotAllowlisted:    "not_allowlisted",
	ReasonAlwaysVerify:      "policy_always_verify",
	ReasonNodeAccessible:    "node_accessible",
	ReasonCredentialMatch:   "credential_match",
	ReasonSecretRotated:     "secret_coordinates_match",
	ReasonServiceAccount:    "service_account_match",
	ReasonNoMatch:           "no_matching_credentials",
	ReasonExpired:           "credentials_expired",
	ReasonPullInFlight:      "pull_in_flight",
	ReasonUnknownOrigin:     "unknown_origin",
	ReasonRecordsUnreadable: "records_unreadable",
	ReasonInvalidImageName:  "invalid_image_name",
	ReasonUnlistedName:      "name_not_on_image",
}

// String returns the reason's label, such as "credential_match".
func (r Reason) String() string {
	if r == 0 || r >= numReasons {
		return "unknown"
	}
	return reasonNames[r]
}

// MarshalText makes a Reason print as its label in JSON.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Decision is the outcome of Decide.
type Decision struct {
	Action Action
	Reason Reason
}

// Status reports the health of the record store.
type Status struct {
	// Records and Intents count what is remembered.
	Records, Intents int
	// UnreadableRecords counts records found unreadable at start-up (kept
	// aside in the store; their images require verification).
	UnreadableRecords int
	// HashKeyCreated is set when the hash key was created at this start,
	// so every recorded credential will be verified once more.
	HashKeyCreated bool
	// RecoveredAt, RecoveryReason and AsidePath describe the last time the
	// store could not be read and was rebuilt; AsidePath keeps the old file.
	RecoveredAt    time.Time
	RecoveryReason string
	AsidePath      string
	// Degraded is set while the tracker could not rebuild its store from
	// the runtime's image list, or once a record did not fit its
	// in-memory index (4 GiB of records): every present image without a
	// record under the pod's name requires verification (under every
	// policy but NeverVerify).
	Degraded bool
}
