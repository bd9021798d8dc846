package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/pull/3084"
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Value",type=string,JSONPath=`.spec.value`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!(self.metadata.name in ['cluster.clusterset.k8s.io', 'clusterset.k8s.io']) || self.spec.value == oldSelf.spec.value",message="the value of the ClusterProperty cluster.clusterset.k8s.io or clusterset.k8s.io cannot change (KEP-2149): delete and recreate it to change the cluster's identity"

// ClusterProperty is one named fact about the cluster it lives in. The
// well-known names are ClusterIDName and ClusterSetName.
type ClusterProperty struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterPropertySpec `json:"spec"`
	// +optional
	Status ClusterPropertyStatus `json:"status,omitempty"`
}

// ClusterPropertySpec holds the property's value.
type ClusterPropertySpec struct {
	// Value is the property's value, up to 128k Unicode code points.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128000
	Value string `json:"value"`
}

// ClusterPropertyStatus reports what implementations observed about the
// property.
type ClusterPropertyStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// ClusterPropertyList is a list of ClusterProperties.
type ClusterPropertyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ClusterProperty `json:"items"`
}

// Well-known property names (KEP-2149).
const (
	// ClusterIDName holds the cluster's ID, unique within its ClusterSet.
	ClusterIDName = "cluster.clusterset.k8s.io"
	// ClusterSetName holds the name of the ClusterSet the cluster belongs to,
	// present exactly while it is a member.
	ClusterSetName = "clusterset.k8s.io"
)
