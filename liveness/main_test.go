package liveness

import (
	"testing"

	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

func TestMain(m *testing.M) { testenv.RunWithFakeClientsets(m) }
