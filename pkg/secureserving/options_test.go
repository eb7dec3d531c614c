package secureserving_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/secureserving"
)

func TestValidate(t *testing.T) {
	kc := []string{"--authentication-kubeconfig", "/etc/pullguard/kubeconfig", "--authorization-kubeconfig", "/etc/pullguard/kubeconfig"}
	cases := []struct {
		name    string
		args    []string
		wantErr string // "" for none
	}{
		{name: "off by default", args: nil},
		{name: "off, kubeconfigs or not", args: []string{"--secure-port", "0", "--tls-cert-file", "a.crt"}},
		{name: "on with both kubeconfigs", args: append([]string{"--secure-port", "10265"}, kc...)},
		{name: "on without an authentication kubeconfig", args: []string{"--secure-port", "10265", "--authorization-kubeconfig", "/k"}, wantErr: "--secure-port is set but --authentication-kubeconfig is not"},
		{name: "on without an authorization kubeconfig", args: []string{"--secure-port", "10265", "--authentication-kubeconfig", "/k"}, wantErr: "--secure-port is set but --authorization-kubeconfig is not"},
		{name: "on without any kubeconfig", args: []string{"--secure-port", "10265"}, wantErr: "without authenticating its clients"},
		{name: "a port out of range", args: append([]string{"--secure-port", "70000"}, kc...), wantErr: "--secure-port 70000 must be between"},
		{name: "a certificate without its key", args: append([]string{"--secure-port", "10265", "--tls-cert-file", "a.crt"}, kc...), wantErr: "--tls-cert-file and --tls-private-key-file go together"},
		{name: "a key without its certificate", args: append([]string{"--secure-port", "10265", "--tls-private-key-file", "a.key"}, kc...), wantErr: "--tls-cert-file and --tls-private-key-file go together"},
		{name: "an empty request-header username header", args: append([]string{"--secure-port", "10265", "--requestheader-username-headers", " "}, kc...), wantErr: `empty value in "requestheader-username-headers"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := secureserving.NewOptions()
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			o.AddFlags(fs)
			require.NoError(t, fs.Parse(c.args))
			o.Complete("/var/lib/pullguard")
			err := o.Validate()
			if c.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, c.wantErr)
		})
	}
}

// TestFlags: the upstream names, kube-scheduler's defaults where pullguard
// keeps them, pullguard's own where it does not.
func TestFlags(t *testing.T) {
	o := secureserving.NewOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.AddFlags(fs)
	for flag, want := range map[string]string{
		"secure-port":                            "0",
		"bind-address":                           "0.0.0.0",
		"cert-dir":                               "",
		"tls-cert-file":                          "",
		"tls-private-key-file":                   "",
		"tls-min-version":                        "",
		"tls-cipher-suites":                      "[]",
		"disable-http2-serving":                  "true",
		"authentication-kubeconfig":              "",
		"authentication-skip-lookup":             "false",
		"authentication-tolerate-lookup-failure": "true",
		"authorization-kubeconfig":               "",
		"authorization-always-allow-paths":       "[/healthz,/readyz,/livez]",
		"client-ca-file":                         "",
		"requestheader-client-ca-file":           "",
	} {
		f := fs.Lookup(flag)
		if assert.NotNil(t, f, "--%s", flag) {
			assert.Equal(t, want, f.DefValue, "--%s", flag)
		}
	}
	o.Complete("/var/lib/pullguard")
	assert.Equal(t, filepath.Join("/var/lib/pullguard", secureserving.CertDir), o.Serving.ServerCert.CertDirectory)
	require.NoError(t, fs.Parse([]string{"--cert-dir", "/etc/pullguard/pki"}))
	o.Complete("/var/lib/pullguard")
	assert.Equal(t, "/etc/pullguard/pki", o.Serving.ServerCert.CertDirectory, "a given --cert-dir is kept")
}

func TestCheckVerbosity(t *testing.T) {
	cases := []struct {
		name    string
		v       string
		vmodule string
		wantErr string
	}{
		{name: "the default", v: "0"},
		{name: "the highest allowed", v: "7", vmodule: "webhook=7,request=2"},
		{name: "-v 8", v: "8", wantErr: "-v is above 7"},
		{name: "a vmodule rule at 8", v: "2", vmodule: "cached_token_authenticator=1,request=8", wantErr: `--vmodule "request=8"`},
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	t.Cleanup(func() { require.NoError(t, fs.Set("v", "0")) })
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, fs.Set("v", c.v))
			err := secureserving.CheckVerbosity(c.vmodule)
			if c.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, c.wantErr)
			assert.ErrorContains(t, err, "TokenReview")
		})
	}
}
