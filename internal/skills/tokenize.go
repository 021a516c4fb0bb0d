package skills

import (
	"strings"
	"unicode"
)

// Tokens splits text into the terms the index and the queries share:
// letters and digits, lower-cased, camelCase and snake_case taken apart,
// stop words and one-character tokens dropped, and a light stemmer so
// that plural, -ing and -ed forms meet ("summarizes", "summarizing" and
// "summarized" are one term; "summarise" meets "summarize").
func Tokens(text string) []string {
	var out []string
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		if t := term(text[start:end]); t != "" {
			out = append(out, t)
		}
		start = -1
	}
	var prev rune
	for i, r := range text {
		word := unicode.IsLetter(r) || unicode.IsDigit(r)
		switch {
		case !word:
			flush(i)
		case start < 0:
			start = i
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			flush(i) // camelCase
			start = i
		}
		prev = r
	}
	flush(len(text))
	return out
}

func term(w string) string {
	w = strings.ToLower(w)
	if len(w) < 2 || stopWords[w] {
		return ""
	}
	return stem(w)
}

// stem strips the commonest English suffixes, and folds British -ise
// spellings onto -ize. It errs toward leaving a word alone: a query and
// a document stemmed alike is all that matters.
func stem(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		w = w[:len(w)-3] + "y"
	case len(w) > 4 && strings.HasSuffix(w, "sses"):
		w = w[:len(w)-2]
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:len(w)-1]
	}
	switch {
	case len(w) > 5 && strings.HasSuffix(w, "ing"):
		w = undouble(w[:len(w)-3])
	case len(w) > 4 && strings.HasSuffix(w, "ed"):
		w = undouble(w[:len(w)-2])
	}
	if len(w) > 4 && (strings.HasSuffix(w, "ise") || strings.HasSuffix(w, "ize")) {
		w = w[:len(w)-3] + "iz"
	} else if len(w) > 3 && (strings.HasSuffix(w, "is") || strings.HasSuffix(w, "iz")) && !strings.HasSuffix(w, "sis") {
		w = w[:len(w)-2] + "iz"
	}
	if len(w) > 3 && strings.HasSuffix(w, "e") {
		w = w[:len(w)-1]
	}
	return w
}

// undouble turns "stopp" (of "stopping") back into "stop".
func undouble(w string) string {
	if n := len(w); n > 2 && w[n-1] == w[n-2] && !strings.ContainsRune("aeiouls", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}

var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an the and or but if then else of to in on at by for from with without into onto
		over under about as is are was were be been being it its this that these those there here
		i me my we our you your he she they them their his her him us
		do does did done can could should would will shall may might must
		not no nor so than too very just also only
		what which who whom whose when where why how all any each every some such
		please want need like get got make let use using
		http https www com org net html`) {
		m[w] = true
	}
	return m
}()
