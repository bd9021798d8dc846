package quotaretry

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	quotaConflict = apierrors.NewConflict(schema.GroupResource{Resource: "resourcequotas"}, "mcsd-member", errors.New("the object has been modified"))
	sliceConflict = apierrors.NewConflict(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "s", errors.New("the object has been modified"))
)

func TestIsQuotaConflict(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"quota conflict", quotaConflict, true},
		{"wrapped", errors.Join(errors.New("creating"), quotaConflict), true},
		{"conflict on the object", sliceConflict, false},
		{"other error", apierrors.NewAlreadyExists(schema.GroupResource{Resource: "resourcequotas"}, "x"), false},
		{"nil", nil, false},
	} {
		if got := IsQuotaConflict(tc.err); got != tc.want {
			t.Errorf("%s: IsQuotaConflict = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWriteRetriesOnlyQuotaConflicts(t *testing.T) {
	calls := 0
	err := Write(context.Background(), func() error {
		calls++
		if calls < 3 {
			return quotaConflict
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("after two quota conflicts: err %v after %d calls, want success after 3", err, calls)
	}
	calls = 0
	err = Write(context.Background(), func() error { calls++; return sliceConflict })
	if !apierrors.IsConflict(err) || calls != 1 {
		t.Fatalf("a conflict on the object: err %v after %d calls, want it at once", err, calls)
	}
	calls = 0
	err = Write(context.Background(), func() error { calls++; return quotaConflict })
	if !IsQuotaConflict(err) || calls != backoff.Steps {
		t.Fatalf("quota conflicts without end: err %v after %d calls, want the conflict after %d", err, calls, backoff.Steps)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	err = Write(ctx, func() error { calls++; return quotaConflict })
	if !IsQuotaConflict(err) || calls != 1 {
		t.Fatalf("with ctx done: err %v after %d calls, want the conflict after 1", err, calls)
	}
	err = Write(context.Background(), func() error { return context.DeadlineExceeded })
	if err != context.DeadlineExceeded {
		t.Fatalf("a write that timed out: err %v, want its error", err)
	}
}
