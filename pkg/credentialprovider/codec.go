package credentialprovider

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"
)

var (
	requestScheme = runtime.NewScheme()
	requestCodecs = serializer.NewCodecFactory(requestScheme)
)

func init() {
	install.Install(requestScheme)
}

// requestEncoder encodes CredentialProviderRequests in one apiVersion.
type requestEncoder struct {
	enc runtime.Encoder
}

func newRequestEncoder(apiVersion string) (requestEncoder, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return requestEncoder{}, err
	}
	info, ok := runtime.SerializerInfoForMediaType(requestCodecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return requestEncoder{}, errors.New("no JSON serializer")
	}
	return requestEncoder{enc: requestCodecs.EncoderForVersion(info.Serializer, gv)}, nil
}

// encode returns the request as JSON in the encoder's version. Fields the
// version does not have (the service account token and annotations before
// v1) are dropped by the conversion.
func (e requestEncoder) encode(image, token string, annotations map[string]string) ([]byte, error) {
	return runtime.Encode(e.enc, &credentialproviderapi.CredentialProviderRequest{
		Image:                     image,
		ServiceAccountToken:       token,
		ServiceAccountAnnotations: annotations,
	})
}

// Response is a checked CredentialProviderResponse.
type Response struct {
	// CacheKeyType is Image, Registry or Global.
	CacheKeyType credentialproviderapi.PluginCacheKeyType
	// CacheDuration is the response's cacheDuration, or nil when unset.
	CacheDuration *time.Duration
	// Auth maps image patterns to credentials.
	Auth map[string]credentialproviderapi.AuthConfig
}

// wireResponse mirrors the JSON of every CredentialProviderResponse
// version (they are identical). It is decoded with encoding/json rather
// than the apimachinery codec so that every error message is written here
// and none can quote the plugin's output (metav1.Duration's, for one,
// quotes the bad value).
type wireResponse struct {
	APIVersion    string                                      `json:"apiVersion"`
	Kind          string                                      `json:"kind"`
	CacheKeyType  string                                      `json:"cacheKeyType"`
	CacheDuration *string                                     `json:"cacheDuration"`
	Auth          map[string]credentialproviderapi.AuthConfig `json:"auth"`
}

const responseKind = "CredentialProviderResponse"

// DecodeResponse decodes and checks a plugin's stdout against the request's
// apiVersion: the apiVersion must equal it, the kind must be
// CredentialProviderResponse, cacheKeyType one of Image, Registry and
// Global, and cacheDuration a non-negative duration. Auth keys are not
// checked, as the kubelet does not check them: keyring.ConfigKey files
// each, and one it rejects is left out. Unknown fields are ignored, for plugins newer than this
// package. Errors describe the problem (a JSON syntax error's offset, the
// field with a wrong type) and never quote the output.
func DecodeResponse(apiVersion string, data []byte) (*Response, error) {
	if len(data) == 0 {
		return nil, errors.New("empty output")
	}
	var w wireResponse
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, describeJSONError(err)
	}
	if w.APIVersion != apiVersion {
		if w.APIVersion == "" {
			return nil, errors.New("response has no apiVersion")
		}
		return nil, fmt.Errorf("response apiVersion differs from the request's %q", apiVersion)
	}
	if w.Kind != responseKind {
		return nil, fmt.Errorf("response kind is not %s", responseKind)
	}
	r := &Response{Auth: w.Auth}
	switch t := credentialproviderapi.PluginCacheKeyType(w.CacheKeyType); t {
	case credentialproviderapi.ImagePluginCacheKeyType,
		credentialproviderapi.RegistryPluginCacheKeyType,
		credentialproviderapi.GlobalPluginCacheKeyType:
		r.CacheKeyType = t
	case "":
		return nil, errors.New("response has no cacheKeyType (want Image, Registry or Global)")
	default:
		return nil, errors.New("response cacheKeyType is not Image, Registry or Global")
	}
	if w.CacheDuration != nil {
		d, err := time.ParseDuration(*w.CacheDuration)
		if err != nil {
			return nil, errors.New("response cacheDuration is not a duration")
		}
		if d < 0 {
			return nil, errors.New("response cacheDuration is negative")
		}
		r.CacheDuration = &d
	}
	return r, nil
}

// describeJSONError turns a decoding error into a message without any of
// the input.
func describeJSONError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("malformed JSON at offset %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Errorf("response is not a JSON object (at offset %d)", typ.Offset)
		}
		// Field may hold map keys (auth patterns) after the first dot.
		top, _, _ := strings.Cut(typ.Field, ".")
		return fmt.Errorf("response field %q has the wrong JSON type (at offset %d)", top, typ.Offset)
	default:
		return errors.New("response cannot be decoded")
	}
}

// Request is what a pass-through reads of a CredentialProviderRequest
// (see Passthrough): its apiVersion, which the response must carry, the
// image, and whether it carries a service account token (the answer is
// then a pod's service account's, never the node's).
type Request struct {
	APIVersion          string
	Image               string
	ServiceAccountToken string
}

// requestKind is the kind of every CredentialProviderRequest.
const requestKind = "CredentialProviderRequest"

// DecodeRequest reads a CredentialProviderRequest of any version (their
// JSON is the same), checking its kind and that its apiVersion is one this
// package knows. Unknown fields are ignored. Errors never quote the data,
// which may hold a service account token.
func DecodeRequest(data []byte) (Request, error) {
	var w struct {
		APIVersion          string `json:"apiVersion"`
		Kind                string `json:"kind"`
		Image               string `json:"image"`
		ServiceAccountToken string `json:"serviceAccountToken"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return Request{}, describeJSONError(err)
	}
	if w.Kind != requestKind {
		return Request{}, fmt.Errorf("request kind is not %s", requestKind)
	}
	if !knownRequestVersion(w.APIVersion) {
		return Request{}, errors.New("request apiVersion is not a credentialprovider.kubelet.k8s.io version")
	}
	if w.Image == "" {
		return Request{}, errors.New("request has no image")
	}
	return Request{APIVersion: w.APIVersion, Image: w.Image, ServiceAccountToken: w.ServiceAccountToken}, nil
}

func knownRequestVersion(v string) bool {
	gv, err := schema.ParseGroupVersion(v)
	return err == nil && gv.Group == credentialproviderapi.GroupName && requestScheme.IsVersionRegistered(gv)
}
