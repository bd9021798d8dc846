package broker

import (
	"context"
	"fmt"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// memberToken creates the long-lived token Secret of the member's
// ServiceAccount name and returns the token once the token controller has
// filled it in and the broker accepts it.
func memberToken(ctx context.Context, kube kubernetes.Interface, namespace, name string, labels map[string]string) (string, error) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name + "-token", Namespace: namespace, Labels: labels,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: name},
		},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	if _, err := kube.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating token Secret for %s: %w", name, err)
	}
	var token string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(namespace).Get(ctx, secret.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		token = string(s.Data[corev1.ServiceAccountTokenKey])
		return token != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("the token controller never filled Secret %s/%s (is kube-controller-manager running?): %w", namespace, secret.Name, err)
	}
	if err := waitAuthenticated(ctx, kube, token); err != nil {
		return "", fmt.Errorf("the token of Secret %s/%s: %w", namespace, secret.Name, err)
	}
	return token, nil
}

// waitAuthenticated returns once the API server authenticates token. The
// server checks a legacy token against its cached copy of the Secret, which
// may still be the one the token controller has not filled yet: a client
// handed the token at once would then be refused as Unauthorized. An
// administrator who may not create TokenReviews skips the wait.
func waitAuthenticated(ctx context.Context, kube kubernetes.Interface, token string) error {
	var reason string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		review, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		switch {
		case apierrors.IsForbidden(err):
			klog.FromContext(ctx).V(2).Info("Not waiting for the broker to accept the member token: no permission to create TokenReviews", "err", err)
			return true, nil
		case err != nil:
			reason = err.Error()
			return false, nil
		}
		reason = review.Status.Error
		return review.Status.Authenticated, nil
	})
	if err != nil {
		return fmt.Errorf("the broker does not accept it (%s): %w", reason, err)
	}
	return nil
}
