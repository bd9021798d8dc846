package proxier

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// The oldest kernel and nft the proxier's table loads on. knftables needs
// nft 1.0.1; the DNAT to an address and port looked up in a map with a
// concatenated key, and typeof maps, need a kernel of the 5.x series, and
// 5.13 is the oldest mcsd is tested with.
const (
	MinKernelVersion = "5.13"
	MinNFTVersion    = "1.0.1"
)

// CheckRequirements returns an error naming what is too old when the
// running kernel or the nft on PATH is older than [MinKernelVersion] or
// [MinNFTVersion].
func CheckRequirements(ctx context.Context) error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return fmt.Errorf("reading the kernel version: %w", err)
	}
	kernel := unix.ByteSliceToString(uts.Release[:])
	out, err := exec.CommandContext(ctx, "nft", "--version").Output()
	if err != nil {
		return fmt.Errorf("running nft --version (nft >= %s must be on PATH): %w", MinNFTVersion, err)
	}
	return checkVersions(kernel, string(out))
}

var versionRE = regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`)

// checkVersions compares a kernel release ("6.18.0-1-amd64") and nft's
// "nftables v1.0.6 (Lester Gooch #5)" with the minimums.
func checkVersions(kernel, nft string) error {
	var errs []error
	if older, err := olderThan(kernel, MinKernelVersion); err != nil || older {
		errs = append(errs, fmt.Errorf("kernel %q: the proxier needs Linux >= %s", kernel, MinKernelVersion))
	}
	if older, err := olderThan(nft, MinNFTVersion); err != nil || older {
		errs = append(errs, fmt.Errorf("nft %q: the proxier needs nft >= %s", nft, MinNFTVersion))
	}
	return errors.Join(errs...)
}

// olderThan says whether the first version number found in have is older
// than want.
func olderThan(have, want string) (bool, error) {
	h, w := versionRE.FindStringSubmatch(have), versionRE.FindStringSubmatch(want)
	if h == nil || w == nil {
		return false, fmt.Errorf("no version number in %q", have)
	}
	for i := 1; i <= 3; i++ {
		a, _ := strconv.Atoi(h[i])
		b, _ := strconv.Atoi(w[i])
		if a != b {
			return a < b, nil
		}
	}
	return false, nil
}

// CleanupLeftovers deletes the proxier's table through each of nfts (one per
// family), or, when none is given, the tables of both families on this host
// in the calling thread's network namespace. It is for an embedder that
// stops using the proxier for good: mcsd leaves its rules in place when it
// exits, so that traffic keeps flowing across a restart. A table that does
// not exist is not an error.
func CleanupLeftovers(ctx context.Context, nfts ...knftables.Interface) error {
	if len(nfts) == 0 {
		for _, family := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
			nft, err := knftables.New(family, TableName)
			if err != nil {
				return fmt.Errorf("proxier: nftables is not usable: %w", err)
			}
			nfts = append(nfts, nft)
		}
	}
	var errs []error
	for _, nft := range nfts {
		tx := nft.NewTransaction()
		// Adding it first makes the deletion succeed whether or not it
		// exists (nft 1.0.6 has no "destroy").
		tx.Add(&knftables.Table{})
		tx.Delete(&knftables.Table{})
		if err := nft.Run(ctx, tx); err != nil {
			errs = append(errs, fmt.Errorf("proxier: deleting table %s: %w", TableName, err))
		}
	}
	return errors.Join(errs...)
}
