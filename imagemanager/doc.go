// Package imagemanager holds the image manager of `pullguard run`: the
// kubelet's EnsureImageExists with the KubeletEnsureSecretPulledImages
// protection, which makes sure a container's image is present and that the
// pod may use it.
//
// pkg/podworkers drives it for every container and cmd/pullguard builds it;
// it depends on credtracker (the decision), pkg/guardedpull (the pull),
// pkg/keyring and pkg/credentialprovider (the pod's credentials),
// pkg/credential, pkg/criruntime (image names) and pkg/imageref (the
// InvalidImageName check). pkg/criproxy, its sibling for `pullguard serve`,
// never imports it.
//
// For each container it asks the runtime whether the image is present,
// asks the credential tracker what to do (use the present image, pull it,
// or fail with ErrImageNeverPull), and for a pull tries the pod's
// credentials in keyring order through the CRI image service until one
// succeeds, recording the one that did: the guarded pull of package
// guardedpull, which pullguard serve's proxy makes too. It records kubelet-style events
// on the pod (the audit trail), backs off failing pulls per pod and image,
// limits parallel pulls and registry QPS as the kubelet's configuration
// names them, and prunes the tracker after image garbage collection.
package imagemanager
