package dnsconfig

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Apply makes the changes of p that are not manual, each against the
// ConfigMap as the plan read it (an update in between is a conflict, not
// lost), and returns what it changed.
func Apply(ctx context.Context, kube kubernetes.Interface, p Plan) ([]string, error) {
	var done []string
	for _, c := range p.Changes {
		if c.Manual != "" || c.After == nil {
			continue
		}
		cms := kube.CoreV1().ConfigMaps(c.After.Namespace)
		var err error
		if c.Before == nil {
			_, err = cms.Create(ctx, c.After, metav1.CreateOptions{})
		} else {
			_, err = cms.Update(ctx, c.After, metav1.UpdateOptions{})
		}
		if err != nil {
			return done, fmt.Errorf("%s: %w (run again: the plan is made anew from what is there)", c.What, err)
		}
		done = append(done, c.What)
	}
	return done, nil
}
