package analysis

import (
	"fmt"
	"html/template"
)

// g formats a coordinate as %g (the "svg" template's numbers).
func g(v float64) string { return fmt.Sprintf("%g", v) }

// htmlBase holds what the HTML pages share: "svg" writes a plot.Plot (package analysis/plot), "rows" and "header"
// a table's rows. Each page clones it
// and adds its own template (pageTemplate).
var htmlBase = template.Must(template.New("base").Funcs(template.FuncMap{"g": g}).Parse(`{{define "svg"}}` +
	`<svg class="{{.Class}}" id="{{.ID}}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {{g .W}} {{g .H}}" width="{{g .W}}" height="{{g .H}}" role="img" aria-label="{{.Title}}">` +
	`<text x="{{g .PadL}}" y="16" class="title">{{.Title}}</text>` +
	`{{range .Elems}}` +
	`{{with .Line}}<line class="{{.Class}}" x1="{{.X1}}" x2="{{.X2}}" y1="{{.Y1}}" y2="{{.Y2}}"/>{{end}}` +
	`{{with .Text}}<text class="{{.Class}}"{{with .Transform}} transform="{{.}}"{{end}}{{with .X}} x="{{.}}"{{end}}{{with .Y}} y="{{.}}"{{end}}{{with .Anchor}} text-anchor="{{.}}"{{end}}>{{.Text}}</text>{{end}}` +
	`{{with .Rect}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"{{if .Title}}><title>{{.Title}}</title></rect>{{else}}/>{{end}}{{end}}` +
	`{{with .Poly}}<polyline class="{{.Class}}" points="{{.Points}}"/>{{end}}` +
	`{{with .Circle}}<circle class="{{.Class}}" cx="{{.CX}}" cy="{{.CY}}" r="1.6"/>{{end}}` +
	`{{end}}</svg>{{end}}` +
	// rows writes htmlRows; header a row of column titles.
	`{{define "rows"}}{{range .}}<tr>{{with .Head}}<th>{{.}}</th>{{end}}{{range .Cells}}<td{{with .Class}} class="{{.}}"{{end}}{{if .Left}} style="text-align:left"{{end}}>{{.Text}}</td>{{end}}</tr>{{if .NL}}{{"\n"}}{{end}}{{end}}{{end}}` +
	`{{define "header"}}<tr>{{range .}}<th>{{.}}</th>{{end}}</tr>{{"\n"}}{{end}}`))

// htmlRow is a table row: an optional heading cell, then data cells; NL ends it with a
// newline in the page's source.
type htmlRow struct {
	Head  string
	Cells []htmlCell
	NL    bool
}

// htmlCell is a data cell; Left aligns it left (the style aligns data right).
type htmlCell struct {
	Text, Class string
	Left        bool
}

// dataRow is a row of data cells ending its line.
func dataRow(cells ...string) htmlRow {
	r := htmlRow{NL: true}
	for _, c := range cells {
		r.Cells = append(r.Cells, htmlCell{Text: c})
	}
	return r
}

// kvRow is a row of a heading and its value.
func kvRow(head, value string, nl bool) htmlRow {
	return htmlRow{Head: head, Cells: []htmlCell{{Text: value}}, NL: nl}
}

// pageTemplate is a page's template: htmlBase and text, which names the page "page".
func pageTemplate(text string) *template.Template {
	return template.Must(template.Must(htmlBase.Clone()).New("page").Parse(text))
}
