package nodeagent_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pullguard/pullguard/pkg/nodeagent"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

func TestServeKubeconfig(t *testing.T) {
	eksKubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: https://ABC.gr7.us-east-1.eks.amazonaws.com
    certificate-authority: /etc/kubernetes/pki/ca.crt
current-context: kubelet
contexts:
- name: kubelet
  context: {cluster: kubernetes, user: kubelet}
users:
- name: kubelet
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: aws-iam-authenticator}
`
	tests := []struct {
		name       string
		flag       string // the kubelet's --kubeconfig
		files      map[string]string
		token      string
		wantServer string
		wantErr    string
	}{
		{name: "kubeadm: the CA embedded", flag: "/etc/kubernetes/kubelet.conf", files: map[string]string{"etc/kubernetes/kubelet.conf": kubeletConf}, token: token, wantServer: apiServer},
		{name: "EKS: the CA a file of the node", flag: "/var/lib/kubelet/kubeconfig", files: map[string]string{"var/lib/kubelet/kubeconfig": eksKubeconfig, "etc/kubernetes/pki/ca.crt": caPEM}, token: token, wantServer: "https://ABC.gr7.us-east-1.eks.amazonaws.com"},
		{name: "no --kubeconfig", token: token, wantErr: "has no --kubeconfig"},
		{name: "the kubelet's kubeconfig is missing", flag: "/etc/kubernetes/kubelet.conf", token: token, wantErr: "the kubelet's --kubeconfig /etc/kubernetes/kubelet.conf (from kubelet.service): open"},
		{name: "not a kubeconfig", flag: "/k", files: map[string]string{"k": "{{{"}, token: token, wantErr: "/k: not a kubeconfig"},
		{name: "no server", flag: "/k", files: map[string]string{"k": "apiVersion: v1\nkind: Config\n"}, token: token, wantErr: "names no cluster with a server"},
		{name: "the CA file missing", flag: "/var/lib/kubelet/kubeconfig", files: map[string]string{"var/lib/kubelet/kubeconfig": eksKubeconfig}, token: token, wantErr: "certificate-authority"},
		{name: "empty token", flag: "/etc/kubernetes/kubelet.conf", files: map[string]string{"etc/kubernetes/kubelet.conf": kubeletConf}, token: " \n", wantErr: "serve's token is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, text := range tt.files {
				p := filepath.Join(root, rel)
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
			}
			k := &nodeinstall.Kubelet{ExecStartFile: "kubelet.service", Flags: map[string]nodeinstall.Flag{}}
			if tt.flag != "" {
				k.Flags["kubeconfig"] = nodeinstall.Flag{Value: tt.flag, File: "kubelet.service"}
			}
			data, err := nodeagent.ServeKubeconfig(root, k, []byte(tt.token+"\n"))
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				if err != nil {
					assert.NotContains(t, err.Error(), token)
				}
				return
			}
			require.NoError(t, err)
			cfg, err := clientcmd.Load(data)
			require.NoError(t, err)
			ctx := cfg.Contexts[cfg.CurrentContext]
			assert.Equal(t, tt.wantServer, cfg.Clusters[ctx.Cluster].Server)
			assert.Equal(t, caPEM, string(cfg.Clusters[ctx.Cluster].CertificateAuthorityData))
			assert.Equal(t, token, cfg.AuthInfos[ctx.AuthInfo].Token)
			assert.Nil(t, cfg.AuthInfos[ctx.AuthInfo].Exec, "serve's identity only, not the kubelet's")
			again, err := nodeagent.ServeKubeconfig(root, k, []byte(tt.token))
			require.NoError(t, err)
			assert.Equal(t, string(data), string(again), "the same bytes each time: an unchanged node writes nothing")
		})
	}
}

// FuzzServeKubeconfig: whatever the kubelet's kubeconfig holds, no panic,
// and no error quotes the token.
func FuzzServeKubeconfig(f *testing.F) {
	f.Add([]byte(kubeletConf))
	f.Add([]byte("clusters: [{name: a, cluster: {server: x, certificate-authority: ../../../etc/shadow}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(root, "k"), data, 0o600))
		k := &nodeinstall.Kubelet{Flags: map[string]nodeinstall.Flag{"kubeconfig": {Value: "/k"}}}
		if _, err := nodeagent.ServeKubeconfig(root, k, []byte(token)); err != nil {
			assert.NotContains(t, err.Error(), token)
		}
	})
}
