#!/usr/bin/env python3
"""Generates the labelled retrieval set (skills.json, queries.json) for
retrieval_test.go: skills made of an action and an object, each described
in one vocabulary, and queries that ask for one of them in other words
(synonyms, phrasing, filler), each labelled with its skill. Run from this
directory; the output is committed, so the test does not need Python."""
import json, random

rng = random.Random(35)

# action: (slug, description verb phrase, words a skill's body uses, ways a user asks)
ACTIONS = [
    ("summarize", "Summarize", ["summary", "overview", "key points"], ["give me the gist of", "boil down", "recap", "condense into a few lines"]),
    ("convert", "Convert", ["conversion", "transform", "format change"], ["turn", "change the format of", "transform", "translate the encoding of"]),
    ("validate", "Validate", ["validation", "check rules", "schema"], ["check for mistakes in", "verify", "make sure there are no errors in", "sanity-check"]),
    ("extract", "Extract fields from", ["extraction", "parse out", "pull values"], ["pull the important values out of", "grab the fields from", "scrape the data in", "get the numbers out of"]),
    ("merge", "Merge", ["combine", "join", "union"], ["combine several", "stitch together", "join up", "put into one"]),
    ("dedupe", "Remove duplicates from", ["deduplicate", "unique", "repeated entries"], ["get rid of repeated entries in", "drop the copies in", "clean out doubles from", "make unique the rows of"]),
    ("translate", "Translate", ["language", "localize", "multilingual"], ["put into French", "render in another language", "localise", "make a German version of"]),
    ("chart", "Chart", ["plot", "graph", "visualization"], ["draw a graph of", "plot", "visualise", "make a diagram from"]),
    ("filter", "Filter", ["select rows", "criteria", "subset"], ["keep only the matching parts of", "narrow down", "select the relevant entries of", "weed out what I do not need in"]),
    ("sort", "Sort", ["order", "rank", "ascending descending"], ["put in order", "rank", "arrange by value", "order from highest to lowest"]),
    ("compress", "Compress", ["zip", "archive", "smaller size"], ["shrink", "zip up", "make smaller", "pack"]),
    ("encrypt", "Encrypt", ["cipher", "protect", "secure key"], ["lock with a password", "protect", "scramble so nobody can read", "secure"]),
    ("backup", "Back up", ["copy", "snapshot", "restore point"], ["keep a safe copy of", "snapshot", "save a spare copy of", "archive a duplicate of"]),
    ("monitor", "Monitor", ["watch", "alert", "changes over time"], ["keep an eye on", "watch for changes in", "get alerted about", "track"]),
    ("schedule", "Schedule", ["calendar", "recurring", "cron"], ["set up a recurring run for", "plan regular", "book a time slot for", "automate weekly"]),
    ("classify", "Classify", ["categories", "labels", "tagging"], ["sort into categories", "label", "tag", "group by kind"]),
    ("anonymize", "Anonymize", ["redact", "personal data", "privacy"], ["strip personal details from", "hide names in", "scrub private info from", "mask the identities in"]),
    ("compare", "Compare", ["difference", "diff", "side by side"], ["spot the differences between two", "diff", "see what changed between versions of", "contrast"]),
    ("forecast", "Forecast", ["predict", "trend", "projection"], ["predict next month from", "project the trend of", "estimate future values from", "guess where things are heading in"]),
    ("clean", "Clean up", ["tidy", "normalize", "fix formatting"], ["tidy up", "fix the messy", "normalise", "straighten out"]),
    ("index", "Index", ["search", "lookup", "full text"], ["make searchable", "build a lookup for", "catalogue", "set up search over"]),
    ("publish", "Publish", ["post", "share", "upload"], ["put online", "share", "upload", "post"]),
    ("audit", "Audit", ["review", "compliance", "inspection"], ["inspect for policy problems", "review for compliance", "go over with a fine-tooth comb", "examine"]),
    ("count", "Count items in", ["tally", "statistics", "totals"], ["tally", "work out how many entries are in", "get totals for", "add up"]),
    ("notify", "Send notifications about", ["email alert", "message", "ping"], ["let people know about", "message the team about", "ping everyone about", "send a heads-up about"]),
]

# object: (slug, description noun phrase, words a skill's body uses, ways a user names it)
OBJECTS = [
    ("csv", "CSV files", ["comma separated", "spreadsheet rows"], ["comma-separated data", "a spreadsheet export", "tabular text data", "the .csv export"]),
    ("invoices", "invoice PDFs", ["billing documents", "receipts"], ["bills", "billing paperwork", "the receipts we got", "supplier statements"]),
    ("logs", "server log files", ["application logs", "log lines"], ["the app's output logs", "system event records", "our error traces", "service journals"]),
    ("emails", "email inboxes", ["mail messages", "mailbox"], ["my mail", "the messages in Outlook", "correspondence", "unread mail"]),
    ("events", "calendar events", ["meetings", "appointments"], ["meetings", "my appointments", "the agenda", "bookings on the schedule"]),
    ("repos", "git repositories", ["source code", "commits"], ["our codebase", "the project history", "commits in the project", "the source tree"]),
    ("tables", "SQL database tables", ["relational records", "query results"], ["rows in Postgres", "the database records", "query output", "data in MySQL"]),
    ("pages", "web pages", ["HTML documents", "websites"], ["a site", "the HTML of a URL", "online articles", "the blog posts"]),
    ("images", "image files", ["photos", "pictures"], ["photos", "pictures", "the screenshots", "JPEG and PNG files"]),
    ("tickets", "support tickets", ["helpdesk requests", "customer issues"], ["customer complaints", "helpdesk cases", "the queue of user issues", "bug reports from customers"]),
    ("prices", "stock prices", ["market quotes", "ticker data"], ["share values", "market data for tickers", "equity quotes", "how shares traded"]),
    ("weather", "weather readings", ["temperature measurements", "forecast data"], ["temperature numbers", "meteorological data", "the rainfall and wind records", "climate observations"]),
]

GENERIC = ("Steps: fetch the input with fetch(url) or read it from args; parse it; "
           "handle errors and empty input; log what you found; return the result "
           "in args, then answer() with a short report. Keep each turn small.")

pairs = [(a, o) for a in ACTIONS for o in OBJECTS]
rng.shuffle(pairs)
pairs = pairs[:220]
skills = []
for a, o in pairs:
    name = f"{a[0]}-{o[0]}"
    desc = f"{a[1]} {o[1]}"
    # As a skill's author would: the "when to use" line names the
    # action and the object in a few words of its own and two of the
    # ways a user might ask; a query uses any of those ways, so it meets
    # the body's words about half the time, and the description's less.
    aw = a[2] + rng.sample(a[3], 2)
    ow = o[2] + rng.sample(o[3], 2)
    body = (f"# {desc}\n\nWhen to use: {', '.join(aw)}; for {', '.join(ow)}.\n\n{GENERIC}\n\n"
            f"```javascript\nfunction run(args) {{ /* {a[0]} {o[0]} */ }}\n```\n")
    skills.append({"name": name, "description": desc, "body": body})

OPENERS = ["", "Please ", "Can you ", "I need to ", "Could you help me ", "I'd like you to ", "Time to "]
CLOSERS = ["", " for me", " today", " and tell me when it's done", " before the Monday meeting", " quickly"]
queries = []
chosen = rng.sample(range(len(skills)), 100)
for i in chosen:
    a, o = pairs[i]
    q = rng.choice(OPENERS) + rng.choice(a[3]) + " " + rng.choice(o[3]) + rng.choice(CLOSERS)
    q = q[0].upper() + q[1:]
    queries.append({"query": q, "skill": skills[i]["name"]})

json.dump(skills, open("skills.json", "w"), indent=1)
open("skills.json", "a").write("\n")
json.dump(queries, open("queries.json", "w"), indent=1)
open("queries.json", "a").write("\n")
print(len(skills), "skills,", len(queries), "queries")
