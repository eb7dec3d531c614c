package nodeagent

import (
	"bytes"
	"errors"
	"fmt"
	"path"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// Bounds of what ServeKubeconfig reads.
const (
	maxKubeconfigBytes = 1 << 20
	maxTokenBytes      = 64 << 10
)

// kubeletKubeconfigFlag is the kubelet's flag naming its kubeconfig.
const kubeletKubeconfigFlag = "kubeconfig"

// serveUser names serve's identity in its kubeconfig.
const serveUser = "pullguard-serve"

// ServeKubeconfig is serve's kubeconfig: the API server, CA and TLS
// server name of the kubelet's own --kubeconfig (read under root: the node
// reaches the API server that way, where the cluster's service address
// may not be reachable from the host's network) and token, serve's
// ServiceAccount token. No error quotes the token.
func ServeKubeconfig(root string, k *nodeinstall.Kubelet, token []byte) ([]byte, error) {
	token = bytes.TrimSpace(token)
	if len(token) == 0 {
		return nil, errors.New("serve's token is empty")
	}
	f, ok := k.Flags[kubeletKubeconfigFlag]
	if !ok || f.Value == "" {
		return nil, fmt.Errorf("the kubelet (%s) has no --kubeconfig: the API server serve asks is unknown", k.ExecStartFile)
	}
	file := f.Value
	data, err := boundedread.ReadFile(nodeinstall.HostPath(root, file), maxKubeconfigBytes)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's --kubeconfig %s (from %s): %w", file, f.Where(), err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's --kubeconfig %s: not a kubeconfig", file)
	}
	cluster := clusterOf(cfg)
	if cluster == nil || cluster.Server == "" {
		return nil, fmt.Errorf("the kubelet's --kubeconfig %s: its current context names no cluster with a server", file)
	}
	ca := cluster.CertificateAuthorityData
	if len(ca) == 0 && cluster.CertificateAuthority != "" {
		caFile := cluster.CertificateAuthority
		if !path.IsAbs(caFile) {
			caFile = path.Join(path.Dir(file), caFile)
		}
		if ca, err = boundedread.ReadFile(nodeinstall.HostPath(root, caFile), maxKubeconfigBytes); err != nil {
			return nil, fmt.Errorf("the kubelet's --kubeconfig %s: certificate-authority: %w", file, err)
		}
	}
	out := clientcmdapi.NewConfig()
	out.Clusters[serveUser] = &clientcmdapi.Cluster{
		Server:                   cluster.Server,
		TLSServerName:            cluster.TLSServerName,
		CertificateAuthorityData: ca,
		InsecureSkipTLSVerify:    cluster.InsecureSkipTLSVerify,
		ProxyURL:                 cluster.ProxyURL,
	}
	out.AuthInfos[serveUser] = &clientcmdapi.AuthInfo{Token: string(token)}
	out.Contexts[serveUser] = &clientcmdapi.Context{Cluster: serveUser, AuthInfo: serveUser}
	out.CurrentContext = serveUser
	b, err := clientcmd.Write(*out)
	if err != nil {
		return nil, errors.New("serve's kubeconfig: it does not encode")
	}
	return b, nil
}

// clusterOf is the cluster of a kubeconfig's current context, else its
// only cluster.
func clusterOf(cfg *clientcmdapi.Config) *clientcmdapi.Cluster {
	if c, ok := cfg.Contexts[cfg.CurrentContext]; ok && c != nil {
		if cl, ok := cfg.Clusters[c.Cluster]; ok {
			return cl
		}
	}
	if len(cfg.Clusters) == 1 {
		for _, cl := range cfg.Clusters {
			return cl
		}
	}
	return nil
}
