package proxier

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"
)

// The oldest kernel and nft the proxier's table loads on. knftables needs
// nft 1.0.1; the DNAT to an address and port looked up in a map with a
// concatenated key, and typeof maps, need a kernel of the 5.x series, and
// 5.13 is the oldest mcsd is tested with.
const (
	minKernelVersion = "5.13"
	minNFTVersion    = "1.0.1"
)

// CheckRequirements returns an error naming what is missing or too old for
// mode on this host: for nftables mode, a kernel older than 5.13 or an nft
// on PATH older than 1.0.1; for iptables mode, the iptables commands
// missing from PATH; for [ModeAuto], both failing.
func CheckRequirements(ctx context.Context, mode Mode) error {
	switch mode {
	case "", ModeNFTables:
		return checkNFTables(ctx)
	case ModeIPTables:
		return checkIPTables()
	}
	_, err := resolveMode(ctx, mode)
	return err
}

// checkNFTables compares the running kernel and the nft on PATH with
// minKernelVersion and minNFTVersion.
func checkNFTables(ctx context.Context) error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return fmt.Errorf("reading the kernel version: %w", err)
	}
	kernel := unix.ByteSliceToString(uts.Release[:])
	out, err := exec.CommandContext(ctx, "nft", "--version").Output()
	if err != nil {
		return fmt.Errorf("running nft --version (nft >= %s must be on PATH): %w", minNFTVersion, err)
	}
	return checkVersions(kernel, string(out))
}

// checkIPTables returns an error naming what is missing when the commands
// of iptables mode are not on PATH. Any iptables that has iptables-restore
// --noflush and the statistic, recent, conntrack and comment matches, the
// nft-backed variant or the legacy one, will do.
func checkIPTables() error {
	for _, cmd := range []string{"iptables", "iptables-restore", "iptables-save"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Errorf("%s is not on PATH (install the iptables package): %w", cmd, err)
		}
	}
	return nil
}

var versionRE = regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`)

// checkVersions compares a kernel release ("6.18.0-1-amd64") and nft's
// "nftables v1.0.6 (Lester Gooch #5)" with the minimums.
func checkVersions(kernel, nft string) error {
	var errs []error
	if older, err := olderThan(kernel, minKernelVersion); err != nil || older {
		errs = append(errs, fmt.Errorf("kernel %q: the proxier needs Linux >= %s", kernel, minKernelVersion))
	}
	if older, err := olderThan(nft, minNFTVersion); err != nil || older {
		errs = append(errs, fmt.Errorf("nft %q: the proxier needs nft >= %s", nft, minNFTVersion))
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
