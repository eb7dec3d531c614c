package credentialprovider

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"
)

// The kubelet's codec for the credentialprovider.kubelet.k8s.io API
// (k8s.io/kubernetes pkg/credentialprovider/plugin): every version
// installed, strict decoding. It encodes the requests pullguard sends and
// decodes the responses it reads and the requests the wrapper reads.
var (
	apiScheme = runtime.NewScheme()
	apiCodecs = serializer.NewCodecFactory(apiScheme, serializer.EnableStrict)
	// apiDecoder decodes any version into the internal types, as the
	// kubelet's UniversalDecoder does.
	apiDecoder = apiCodecs.UniversalDecoder()
)

func init() {
	install.Install(apiScheme)
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
	info, ok := runtime.SerializerInfoForMediaType(apiCodecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return requestEncoder{}, errors.New("no JSON serializer")
	}
	return requestEncoder{enc: apiCodecs.EncoderForVersion(info.Serializer, gv)}, nil
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

// Response is a CredentialProviderResponse as the kubelet uses it.
type Response struct {
	// CacheKeyType is Image, Registry or Global.
	CacheKeyType credentialproviderapi.PluginCacheKeyType
	// CacheDuration is the response's cacheDuration, or nil when unset
	// (the provider's defaultCacheDuration applies). Zero or negative:
	// the kubelet does not cache the answer (a negative one it stores
	// already expired).
	CacheDuration *time.Duration
	// Auth maps image patterns to credentials, keys unchecked (see
	// DecodeResponse).
	Auth map[string]credentialproviderapi.AuthConfig
}

const (
	responseKind = "CredentialProviderResponse"
	requestKind  = "CredentialProviderRequest"
)

// DecodeResponse decodes a plugin's stdout as the kubelet v1.36 does
// (execPlugin.ExecPlugin and pluginProvider.provide), with the kubelet's
// own decoders, and accepts exactly the responses the kubelet uses:
//
//   - the apiVersion, read as apimachinery's JSON meta factory reads it,
//     equals apiVersion (the provider's);
//   - the whole output then decodes with the strict codec: one JSON
//     object whose field names are the API's, in their case, none twice
//     (at any depth, auth keys included), with the right JSON types and a
//     cacheDuration that time.ParseDuration reads (negative too);
//   - the kind is CredentialProviderResponse;
//   - cacheKeyType is Image, Registry or Global.
//
// Auth keys are not checked, as the kubelet does not check them:
// keyring.ConfigKey files each, and one it rejects is left out.
//
// The errors describe the problem in words of their own (a JSON syntax
// error's offset, a field of the API by name) and never hold any of the
// output, which holds credentials: not a value, nor a field name the API
// does not have, nor an auth key.
func DecodeResponse(apiVersion string, data []byte) (*Response, error) {
	if len(data) == 0 {
		return nil, errors.New("empty output")
	}
	gvk, err := jsonserializer.DefaultMetaFactory.Interpret(data)
	if err != nil {
		return nil, describeTypeMeta(subjectResponse, data)
	}
	if got := gvk.GroupVersion().String(); got != apiVersion {
		if got == "" {
			return nil, errors.New("response has no apiVersion")
		}
		return nil, fmt.Errorf("response apiVersion differs from the request's %q", apiVersion)
	}
	obj, err := decodeAs(subjectResponse, data)
	if err != nil {
		return nil, err
	}
	r, ok := obj.(*credentialproviderapi.CredentialProviderResponse)
	if !ok {
		return nil, fmt.Errorf("response decodes to %T, not a CredentialProviderResponse", obj)
	}
	out := &Response{CacheKeyType: r.CacheKeyType, Auth: r.Auth}
	switch r.CacheKeyType {
	case credentialproviderapi.ImagePluginCacheKeyType,
		credentialproviderapi.RegistryPluginCacheKeyType,
		credentialproviderapi.GlobalPluginCacheKeyType:
	case "":
		return nil, errors.New("response has no cacheKeyType (want Image, Registry or Global)")
	default:
		return nil, errors.New("response cacheKeyType is not Image, Registry or Global")
	}
	if r.CacheDuration != nil {
		d := r.CacheDuration.Duration
		out.CacheDuration = &d
	}
	return out, nil
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

// DecodeRequest reads a CredentialProviderRequest of any
// credentialprovider.kubelet.k8s.io version with the strict codec the
// kubelet encodes it with: a request the kubelet did not write (a field
// the version does not have, a field twice or miscased) is refused, as is
// one without an image. Errors never hold the data, which may hold a
// service account token.
func DecodeRequest(data []byte) (Request, error) {
	if len(data) == 0 {
		return Request{}, errors.New("empty request")
	}
	gvk, err := jsonserializer.DefaultMetaFactory.Interpret(data)
	if err != nil {
		return Request{}, describeTypeMeta(subjectRequest, data)
	}
	if !knownAPIVersion(gvk.GroupVersion()) {
		return Request{}, errors.New("request apiVersion is not a credentialprovider.kubelet.k8s.io version")
	}
	obj, err := decodeAs(subjectRequest, data)
	if err != nil {
		return Request{}, err
	}
	r, ok := obj.(*credentialproviderapi.CredentialProviderRequest)
	if !ok {
		return Request{}, fmt.Errorf("request decodes to %T, not a CredentialProviderRequest", obj)
	}
	if r.Image == "" {
		return Request{}, errors.New("request has no image")
	}
	return Request{APIVersion: gvk.GroupVersion().String(), Image: r.Image, ServiceAccountToken: r.ServiceAccountToken}, nil
}

// decodeAs decodes data with the strict codec into the internal type of
// s's kind, refusing another kind or group as the kubelet's decodeResponse
// does.
func decodeAs(s subject, data []byte) (runtime.Object, error) {
	obj, gvk, err := apiDecoder.Decode(data, nil, nil)
	// A strict-decoding error comes with the object: a wrong kind is
	// said first.
	if (err == nil || runtime.IsStrictDecodingError(err)) && gvk != nil && (gvk.Kind != s.kind || gvk.Group != credentialproviderapi.GroupName) {
		return nil, fmt.Errorf("%s kind is not %s", s.name, s.kind)
	}
	if err != nil {
		return nil, describeDecodeError(s, data, err)
	}
	return obj, nil
}

func knownAPIVersion(gv schema.GroupVersion) bool {
	return gv.Group == credentialproviderapi.GroupName && apiScheme.IsVersionRegistered(gv)
}
