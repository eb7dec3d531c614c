package imagemanager

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// podCredentials looks up a pod's credentials for one image at most once:
// the tracker asks only when its decision depends on them, and a pull uses
// the same list.
type podCredentials struct {
	m     *Manager
	ctx   context.Context
	req   Request
	image string

	done  bool
	creds []credential.Credential
}

func (c *podCredentials) get() []credential.Credential {
	if !c.done {
		c.creds = c.m.lookup(c.ctx, c.req, c.image)
		c.done = true
	}
	return c.creds
}

// lookup builds the pod's keyring (pull secrets, then the node's docker
// config, then credential provider plugins) and returns the candidates for
// image. A malformed pull secret is skipped with a Warning event naming it;
// a failing plugin is logged; the pod's other credentials still count.
func (m *Manager) lookup(ctx context.Context, req Request, image string) []credential.Credential {
	secrets, errs := keyring.FromSecrets(m.hasher, req.PullSecrets)
	for _, err := range errs {
		var se *keyring.SecretError
		if errors.As(err, &se) {
			m.event(req, corev1.EventTypeWarning, ReasonFailedToRetrieveAuth,
				"Unable to use image pull secret %q (%s): %v; attempting to pull the image may not succeed.", se.Namespace+"/"+se.Name, se.Field, se.Err)
			continue
		}
		m.event(req, corev1.EventTypeWarning, ReasonFailedToRetrieveAuth, "Unable to use an image pull secret: %v; attempting to pull the image may not succeed.", err)
	}
	krs := []keyring.Keyring{secrets}
	if m.nodeKeyring != nil {
		krs = append(krs, m.nodeKeyring)
	}
	if m.providers != nil {
		krs = append(krs, m.providers.ForPod(podInfo(req.Pod)))
	}
	creds, err := keyring.Merge(krs...).Lookup(ctx, image)
	if err != nil {
		m.logger.Error(err, "Some credentials could not be looked up; going on with the others", "pod", podRef(req.Pod), "image", image, "candidates", len(creds))
	}
	return creds
}

func podInfo(p *corev1.Pod) credentialprovider.PodInfo {
	if p == nil {
		return credentialprovider.PodInfo{}
	}
	return credentialprovider.PodInfo{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), ServiceAccountName: p.Spec.ServiceAccountName}
}
