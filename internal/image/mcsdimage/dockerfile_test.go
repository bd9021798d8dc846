package mcsdimage

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// dockerfile is what the Dockerfile says about the image it builds: its
// final stage, and the go build of the stage that makes the binary.
type dockerfile struct {
	Base       string     // debian:bookworm-slim
	Packages   []string   // apt-get install
	Checks     [][]string // the RUN's other commands: nft --version
	CopyFrom   string     // the binary copied in, as the build stage wrote it
	CopyTo     string     // where it goes
	User       string
	Entrypoint []string
	Labels     map[string]string
	GoBuild    []string // the go build command's words, its environment first
}

// parseDockerfile reads the Dockerfile with its build arguments set to args
// (the --build-arg values; unset ones take their ARG default).
func parseDockerfile(path string, args map[string]string) (dockerfile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return dockerfile{}, err
	}
	var instructions []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		instructions = append(instructions, cur.String())
		cur.Reset()
	}

	var df dockerfile
	vars := map[string]string{}
	final := false
	for _, ins := range instructions {
		keyword, rest, _ := strings.Cut(ins, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(keyword) {
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			if v, ok := args[name]; ok {
				def = v
			}
			vars[name] = def
		case "FROM":
			f := strings.Fields(expand(rest, vars))
			df.Base = f[0]
			for _, w := range f {
				if !strings.HasPrefix(w, "--") {
					df.Base = w
					break
				}
			}
			final = !slices.Contains(f, "AS")
			// Each stage sees only the ARGs declared in it.
			vars = map[string]string{}
		case "RUN":
			for _, command := range strings.Split(rest, "&&") {
				words := shellWords(expand(command, vars))
				words = slices.DeleteFunc(words, func(w string) bool { return strings.HasPrefix(w, "--mount=") })
				switch {
				case len(words) == 0:
				case slices.Contains(words, "go") && slices.Contains(words, "build"):
					df.GoBuild = words
				case final && words[0] == "apt-get" && len(words) > 1 && words[1] == "install":
					for _, w := range words[2:] {
						if !strings.HasPrefix(w, "-") {
							df.Packages = append(df.Packages, w)
						}
					}
				case final && (words[0] == "apt-get" || words[0] == "rm"):
				case final:
					df.Checks = append(df.Checks, words)
				}
			}
		case "COPY":
			if final {
				f := strings.Fields(rest)
				df.CopyFrom, df.CopyTo = f[len(f)-2], f[len(f)-1]
			}
		case "USER":
			df.User = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &df.Entrypoint); err != nil {
				return dockerfile{}, fmt.Errorf("ENTRYPOINT %s: %w", rest, err)
			}
		case "LABEL":
			df.Labels = map[string]string{}
			for _, kv := range shellWords(expand(rest, vars)) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return dockerfile{}, fmt.Errorf("LABEL %q is not key=value", kv)
				}
				df.Labels[k] = v
			}
		}
	}
	return df, nil
}

// expand substitutes ${NAME} and $NAME from vars.
func expand(s string, vars map[string]string) string {
	return os.Expand(s, func(name string) string { return vars[name] })
}

// shellWords splits s into words as a shell would, for the quoting the
// Dockerfile uses: double quotes, no escapes.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case !quoted && (r == ' ' || r == '\t'):
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// The Dockerfile and this package describe one image: a change to either
// that the other does not follow fails here.
func TestRecipeMatchesDockerfile(t *testing.T) {
	const version, revision = "v9.8.7", "0123abcd"
	df, err := parseDockerfile("../../../Dockerfile", map[string]string{"VERSION": version, "REVISION": revision})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the base is the slim image of the suite the root filesystem is built from", func(t *testing.T) {
		if want := "debian:" + Base.Suite + "-slim"; df.Base != want {
			t.Errorf("Dockerfile's final stage is FROM %s, the recipe builds %s", df.Base, want)
		}
	})
	t.Run("the same packages are installed and checked", func(t *testing.T) {
		if got, want := slices.Sorted(slices.Values(df.Packages)), slices.Sorted(slices.Values(Base.Packages)); !slices.Equal(got, want) {
			t.Errorf("Dockerfile installs %q, the recipe %q", got, want)
		}
		if !slices.EqualFunc(df.Checks, Base.Check, slices.Equal) {
			t.Errorf("Dockerfile checks %q, the recipe %q", df.Checks, Base.Check)
		}
	})
	t.Run("the binary is in the same place and runs the same way", func(t *testing.T) {
		if df.CopyTo != BinaryPath {
			t.Errorf("Dockerfile copies the binary to %s, the recipe to %s", df.CopyTo, BinaryPath)
		}
		if !slices.Equal(df.Entrypoint, []string{BinaryPath}) {
			t.Errorf("Dockerfile's ENTRYPOINT %q, the recipe's %q", df.Entrypoint, BinaryPath)
		}
		if df.User != User {
			t.Errorf("Dockerfile's USER %s, the recipe's %s", df.User, User)
		}
	})
	t.Run("the labels are the same", func(t *testing.T) {
		want := Labels(version, revision)
		if len(df.Labels) != len(want) {
			t.Errorf("Dockerfile's labels %v, the recipe's %v", df.Labels, want)
		}
		for k, v := range want {
			if df.Labels[k] != v {
				t.Errorf("label %s: Dockerfile %q, recipe %q", k, df.Labels[k], v)
			}
		}
	})
	t.Run("the binary is built the same way", func(t *testing.T) {
		if !slices.Contains(df.GoBuild, "CGO_ENABLED=0") {
			t.Errorf("Dockerfile's go build %q is not static (CGO_ENABLED=0)", df.GoBuild)
		}
		args := GoBuildArgs(version, revision, df.CopyFrom)
		i := slices.Index(df.GoBuild, "go")
		if i < 0 || !slices.Equal(df.GoBuild[i+1:], args) {
			t.Errorf("Dockerfile builds with\n  %q\nthe recipe with\n  %q", df.GoBuild, args)
		}
	})
}

func TestParseDockerfileReadsEveryField(t *testing.T) {
	df, err := parseDockerfile("../../../Dockerfile", nil)
	if err != nil {
		t.Fatal(err)
	}
	if df.Base == "" || len(df.Packages) == 0 || len(df.Checks) == 0 || df.CopyTo == "" || df.CopyFrom == "" ||
		df.User == "" || len(df.Entrypoint) == 0 || len(df.Labels) == 0 || len(df.GoBuild) == 0 {
		t.Errorf("the parser missed part of the Dockerfile: %+v", df)
	}
	if df.Labels["org.opencontainers.image.version"] != "v0.0.0-dev" {
		t.Errorf("without build arguments the version label is %q, want the ARG default v0.0.0-dev", df.Labels["org.opencontainers.image.version"])
	}
}
