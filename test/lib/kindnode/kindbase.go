package kindnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// kindBaseFiles lists kind's base image files (images/base/files of the
// kind module test/tools/kind pins) with the modes its Dockerfile gives
// them: programs 0755, everything else 0644. The module cache keeps them
// read-only, so the modes are set here, not taken from disk.
func kindBaseFiles(ctx context.Context, root string) ([]file, error) {
	module, err := kindModuleDir(ctx, root)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(module, "images", "base", "files")
	var files []file
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		dest := "/" + filepath.ToSlash(rel)
		mode := fs.FileMode(0o644)
		if parent := path.Dir(dest); parent == "/usr/local/bin" || parent == "/kind/bin" {
			mode = 0o755
		}
		files = append(files, file{path: dest, source: p, mode: mode})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading kind's base files in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no base files in %s: is it the kind module?", dir)
	}
	return files, nil
}

// kindModuleDir is the kind module's directory in the module cache,
// downloaded first if need be.
func kindModuleDir(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/kind")
	cmd.Dir = filepath.Join(root, "test", "tools", "kind")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("downloading the kind module: %w\n%s", err, stderr.String())
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download of the kind module said %q: %v", out, err)
	}
	return mod.Dir, nil
}

// serviceLinks are what kind's base image does with systemctl: enable
// containerd, kubelet and undo-mount-hacks (wanted by multi-user.target)
// and mask systemd-binfmt, which would register binary formats in the
// kernel, for every container at once.
func serviceLinks() []file {
	var links []file
	for _, unit := range []string{"containerd.service", "kubelet.service", "undo-mount-hacks.service"} {
		links = append(links, file{
			path: "/etc/systemd/system/multi-user.target.wants/" + unit,
			link: "/etc/systemd/system/" + unit,
		})
	}
	return append(links, file{path: "/etc/systemd/system/systemd-binfmt.service", link: "/dev/null"})
}

// writeCRIBaseSpec writes containerd's base runtime spec for the node's
// pods as kind's base image makes it: `ctr oci spec` with kind's
// mount-product-files hook added and the process's rlimits removed. It
// returns out.
func writeCRIBaseSpec(ctx context.Context, ctr, out string) (string, error) {
	raw, err := exec.CommandContext(ctx, ctr, "oci", "spec").Output()
	if err != nil {
		return "", fmt.Errorf("%s oci spec: %w", ctr, err)
	}
	var spec map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&spec); err != nil {
		return "", fmt.Errorf("reading the spec of %s oci spec: %w", ctr, err)
	}
	if process, ok := spec["process"].(map[string]any); ok {
		delete(process, "rlimits")
	}
	hooks, _ := spec["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
		spec["hooks"] = hooks
	}
	create, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(create, map[string]any{"path": "/kind/bin/mount-product-files.sh"})
	data, err := json.MarshalIndent(spec, "", "    ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		return "", err
	}
	return out, nil
}

// stage lays the files out under dir, for a layer of them.
func stage(dir string, files []file) error {
	for _, f := range files {
		dest := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(f.path, "/")))
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		if f.source == "" {
			if err := os.Symlink(f.link, dest); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(f.source)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dest, data, f.mode); err != nil {
			return err
		}
		// WriteFile's mode passes through the umask.
		if err := os.Chmod(dest, f.mode); err != nil {
			return err
		}
	}
	return nil
}
