package controller

import (
	"testing"

	"github.com/mcsd-io/mcsd/test/testenv"
)

func TestMain(m *testing.M) { testenv.RunWithFakeClientsets(m) }
