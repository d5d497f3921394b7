package dashboard

import "github.com/ratekeeper/ratekeeper/internal/topk"

// TopRuleOf is the answer's list of rule's keys of kind over span, from t.
func TopRuleOf(rule string, kind topk.Kind, span string, t topk.Top) TopRule {
	tr := TopRule{Rule: rule, Kind: kind.String(), Span: span, Total: t.Total, Floor: t.Floor, Bound: t.Bound, Entries: []TopEntry{}}
	for _, e := range t.Entries {
		tr.Entries = append(tr.Entries, TopEntry{Key: e.Key, Count: e.Count, Error: e.Err})
	}
	return tr
}
