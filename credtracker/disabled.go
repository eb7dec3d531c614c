package credtracker

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/pkg/credential"
)

// Disabled returns the Tracker for a disabled KubeletEnsureSecretPulledImages
// gate: the stock kubelet behaviour (Always pulls; IfNotPresent pulls only
// an absent image; Never fails only for an absent image) and no records.
func Disabled() Tracker { return disabled{} }

type disabled struct{}

var _ Tracker = disabled{}

func (disabled) Decide(req Request) Decision {
	var d Decision
	switch {
	case req.PullPolicy == corev1.PullAlways:
		d = Decision{Action: Pull, Reason: ReasonAlways}
	case req.ImageRef == "":
		d = deny(req, ReasonAbsent)
	default:
		d = Decision{Action: UseImage, Reason: ReasonFeatureDisabled}
	}
	countCheck(d)
	return d
}

func (disabled) RecordPullIntent(string) error                                 { return nil }
func (disabled) RecordImagePulled(string, string, credential.Credential) error { return nil }
func (disabled) RecordImagePullFailed(string) error                            { return nil }
func (disabled) PruneImages([]Image, time.Time) (int, error)                   { return 0, nil }
func (disabled) PruneImage(string, time.Time) (bool, error)                    { return false, nil }
func (disabled) ForgetSecret(string, string, string) error                     { return nil }
func (disabled) ForgetServiceAccount(string, string, string) error {
	return nil
}
func (disabled) ForgetNamespace(string) error { return nil }
func (disabled) Records() []ImageRecord       { return nil }
func (disabled) Status() Status               { return Status{} }
func (disabled) Close() error                 { return nil }
