package podworkers

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/pullguard/pullguard/internal/safedecode"
)

// Manifests are the objects read from files: Secrets and ServiceAccounts
// by namespace and name, Pods in file order.
type Manifests struct {
	Secrets         map[types.NamespacedName]*corev1.Secret
	ServiceAccounts map[types.NamespacedName]*corev1.ServiceAccount
	Pods            []*corev1.Pod
}

// ErrInvalidManifest is wrapped by every error about a manifest's content.
var ErrInvalidManifest = errors.New("invalid manifest")

// strict decodes with the client-go scheme and rejects unknown and
// duplicated fields.
var strict = serializer.NewCodecFactory(clientscheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// LoadFiles reads multi-document YAML or JSON (also v1 Lists) from each
// file, like `kubectl apply -f`. Only v1 Secret, ServiceAccount and Pod
// objects are accepted. Namespaces default to "default"; an object without
// metadata.uid gets one derived from its kind, namespace and name, so a
// second run sees the same objects. Errors name the file, the document and
// the object.
func LoadFiles(paths ...string) (*Manifests, error) {
	m := &Manifests{Secrets: map[types.NamespacedName]*corev1.Secret{}, ServiceAccounts: map[types.NamespacedName]*corev1.ServiceAccount{}}
	if len(paths) == 0 {
		return nil, errors.New("no manifest files given")
	}
	for _, path := range paths {
		data, err := ReadFileLimited(path, 0)
		if err != nil {
			return nil, err
		}
		if err := m.add(path, data); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Load reads manifests from data as LoadFiles reads a file; name is used
// in errors.
func Load(name string, data []byte) (*Manifests, error) {
	m := &Manifests{Secrets: map[types.NamespacedName]*corev1.Secret{}, ServiceAccounts: map[types.NamespacedName]*corev1.ServiceAccount{}}
	if err := m.add(name, data); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Manifests) add(path string, data []byte) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(withFinalNewline(data)), 4096)
	for doc := 1; ; doc++ {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			// The decoder's message can quote the document: described
			// by line or offset only.
			return fmt.Errorf("%w: %s: document %d: %s", ErrInvalidManifest, path, doc, safedecode.Describe(err))
		}
		raw.Raw = bytes.TrimSpace(raw.Raw)
		if len(raw.Raw) == 0 || bytes.Equal(raw.Raw, []byte("null")) {
			continue
		}
		where := fmt.Sprintf("%s: document %d", path, doc)
		if err := m.addObject(where, raw.Raw); err != nil {
			return err
		}
	}
}

// addObject decodes one object. Its errors name the file, the document
// and the field, never the content: apimachinery reports a missing kind
// with the whole object, a Secret's password included.
func (m *Manifests) addObject(where string, raw []byte) error {
	if problem := safedecode.TypeMeta(raw); problem != "" {
		return fmt.Errorf("%w: %s: %s", ErrInvalidManifest, where, problem)
	}
	obj, gvk, err := strict.Decode(raw, nil, nil)
	if err != nil {
		return fmt.Errorf("%w: %s: %s", ErrInvalidManifest, where, safedecode.Describe(err))
	}
	switch o := obj.(type) {
	case *corev1.List:
		for i, item := range o.Items {
			if err := m.addObject(fmt.Sprintf("%s: items[%d]", where, i), item.Raw); err != nil {
				return err
			}
		}
		return nil
	case *corev1.Secret:
		key, err := objectKey(where, "Secret", &o.ObjectMeta)
		if err != nil {
			return err
		}
		if _, dup := m.Secrets[key]; dup {
			return fmt.Errorf("%w: %s: Secret %s is defined twice", ErrInvalidManifest, where, key)
		}
		m.Secrets[key] = o
	case *corev1.ServiceAccount:
		key, err := objectKey(where, "ServiceAccount", &o.ObjectMeta)
		if err != nil {
			return err
		}
		if _, dup := m.ServiceAccounts[key]; dup {
			return fmt.Errorf("%w: %s: ServiceAccount %s is defined twice", ErrInvalidManifest, where, key)
		}
		m.ServiceAccounts[key] = o
	case *corev1.Pod:
		key, err := objectKey(where, "Pod", &o.ObjectMeta)
		if err != nil {
			return err
		}
		if err := checkPod(where, key, o); err != nil {
			return err
		}
		for _, p := range m.Pods {
			if p.Namespace == o.Namespace && p.Name == o.Name {
				return fmt.Errorf("%w: %s: Pod %s is defined twice", ErrInvalidManifest, where, key)
			}
		}
		m.Pods = append(m.Pods, o)
	default:
		return fmt.Errorf("%w: %s: kind %s is not supported (only v1 Secret, ServiceAccount and Pod)", ErrInvalidManifest, where, gvk.GroupVersion().String()+" "+gvk.Kind)
	}
	return nil
}

// objectKey checks an object's name and defaults its namespace and uid.
func objectKey(where, kind string, om interface {
	GetName() string
	GetNamespace() string
	SetNamespace(string)
	GetUID() types.UID
	SetUID(types.UID)
}) (types.NamespacedName, error) {
	if om.GetName() == "" {
		return types.NamespacedName{}, fmt.Errorf("%w: %s: %s has no metadata.name", ErrInvalidManifest, where, kind)
	}
	if om.GetNamespace() == "" {
		om.SetNamespace(corev1.NamespaceDefault)
	}
	if om.GetUID() == "" {
		om.SetUID(DerivedUID(kind, om.GetNamespace(), om.GetName()))
	}
	return types.NamespacedName{Namespace: om.GetNamespace(), Name: om.GetName()}, nil
}

// DerivedUID is the uid given to an object that has none: a name-based
// UUID (version 5 layout) of its kind, namespace and name.
func DerivedUID(kind, namespace, name string) types.UID {
	sum := sha256.Sum256([]byte("pullguard/" + kind + "/" + namespace + "/" + name))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

func checkPod(where string, key types.NamespacedName, p *corev1.Pod) error {
	if len(p.Spec.Containers) == 0 {
		return fmt.Errorf("%w: %s: Pod %s: spec.containers must not be empty", ErrInvalidManifest, where, key)
	}
	check := func(field string, cs []corev1.Container) error {
		for i, c := range cs {
			switch {
			case c.Name == "":
				return fmt.Errorf("%w: %s: Pod %s: %s[%d].name is required", ErrInvalidManifest, where, key, field, i)
			case c.Image == "":
				return fmt.Errorf("%w: %s: Pod %s: %s[%d].image is required", ErrInvalidManifest, where, key, field, i)
			}
			switch c.ImagePullPolicy {
			case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
			default:
				return fmt.Errorf("%w: %s: Pod %s: %s[%d].imagePullPolicy %q is not Always, IfNotPresent or Never", ErrInvalidManifest, where, key, field, i, c.ImagePullPolicy)
			}
		}
		return nil
	}
	if err := check("spec.initContainers", p.Spec.InitContainers); err != nil {
		return err
	}
	return check("spec.containers", p.Spec.Containers)
}
