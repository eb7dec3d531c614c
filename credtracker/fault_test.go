package credtracker

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

func TestFailedRecordWriteKeepsTheIntent(t *testing.T) {
	const image, ref = "registry.example/team-a/app:v1", codecRef
	dir := t.TempDir()
	inv := ImageInventoryFunc(func(context.Context) ([]Image, error) { return []Image{{Ref: ref, Names: []string{image}}}, nil })
	open := func() *tracker {
		tr, err := New(context.Background(), Config{Dir: dir}, inv, WithLogger(klog.Background().V(10)))
		require.NoError(t, err)
		return tr.(*tracker)
	}
	req := Request{Image: image, ImageRef: ref, Names: []string{image}, PullPolicy: corev1.PullIfNotPresent}
	tr := open()
	secret := credential.Credential{Source: credential.Source{Kind: credential.SourceSecret, Namespace: "team-a", Name: "regcred", UID: "u"}, Hash: credential.Hash{1}}

	require.NoError(t, tr.RecordPullIntent(image))
	// The disk fails just as the pull is recorded.
	tr.writeFault = func(op string) error {
		if op == "record" {
			return errors.New("input/output error")
		}
		return nil
	}
	require.Error(t, tr.RecordImagePulled(image, ref, secret))
	tr.writeFault = nil
	assert.Equal(t, ReasonNoMatch, tr.Decide(req).Reason, "memory keeps the record")

	// Another tenant's refused pull of the same image must not remove the
	// intent, the only trace of the first pull on disk.
	require.NoError(t, tr.RecordPullIntent(image))
	require.NoError(t, tr.RecordImagePullFailed(image))
	assert.Equal(t, 1, tr.Status().Intents)
	require.NoError(t, tr.Close())

	tr = open()
	defer tr.Close()
	assert.Equal(t, ReasonNoMatch, tr.Decide(req).Reason, "after a restart the image is not preloaded")
}
