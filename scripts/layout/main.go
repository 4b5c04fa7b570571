// Command layout prints the measures of the code's layout that docs/architecture.md holds
// the packages to: non-test lines per package, the largest non-test files and the longest
// functions (test files included), each against its limit. Lines are counted as wc -l
// counts them; a function's length is from its func keyword to its closing brace.
//
//	go run ./scripts/layout            # from the module root
//	go run ./scripts/layout -top 20
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The limits the layout is held to (docs/architecture.md, "Measures").
const (
	maxPackageLines  = 6000
	maxFileLines     = 1000
	maxFunctionLines = 150
)

type item struct {
	name  string
	lines int
}

func main() {
	top := flag.Int("top", 10, "how many files and functions to list")
	flag.Parse()
	if err := run(*top); err != nil {
		fmt.Fprintln(os.Stderr, "layout:", err)
		os.Exit(1)
	}
}

func run(top int) error {
	pkgs := map[string]int{}
	var files, funcs []item
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := strings.Count(string(src), "\n")
		if !strings.HasSuffix(path, "_test.go") {
			pkgs[filepath.Dir(path)] += n
			files = append(files, item{path, n})
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
				funcs = append(funcs, item{fmt.Sprintf("%s:%d %s", path, fset.Position(fn.Pos()).Line, funcName(fn)), lines})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var ps []item
	for p, n := range pkgs {
		ps = append(ps, item{p, n})
	}
	report("non-test lines per package", ps, len(ps), maxPackageLines)
	report("largest non-test files", files, top, maxFileLines)
	report("longest functions", funcs, top, maxFunctionLines)
	return nil
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// report prints the n largest of items and how many of all of them pass limit.
func report(title string, items []item, n, limit int) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].lines != items[j].lines {
			return items[i].lines > items[j].lines
		}
		return items[i].name < items[j].name
	})
	over := 0
	for _, it := range items {
		if it.lines > limit {
			over++
		}
	}
	fmt.Printf("%s (limit %d; %d over):\n", title, limit, over)
	for _, it := range items[:min(n, len(items))] {
		mark := ""
		if it.lines > limit {
			mark = "  over"
		}
		fmt.Printf("  %6d  %s%s\n", it.lines, it.name, mark)
	}
	fmt.Println()
}
