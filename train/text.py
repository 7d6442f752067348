"""A generator of varied English text for synthetic training speech (no corpus download).

Sentences come from templates of several registers (news, conversation, narration, instructions,
questions, meetings, lectures, numbers and dates, lists) filled from word lists, so the speech
synthesised from them covers ordinary vocabulary, names, numbers, punctuation and disfluencies.
Everything is drawn from one ``random.Random``: the same seed gives the same text.
"""

from __future__ import annotations

import random

FIRST = ("James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara Richard Susan "
         "Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa Anthony Betty Mark Sandra Paul "
         "Ashley Steven Emily Andrew Donna Kevin Michelle Brian Carol George Amanda Edward Melissa Ronald Deborah "
         "Timothy Stephanie Jason Rebecca Jeffrey Laura Ryan Sharon Jacob Cynthia Gary Kathleen Nicholas Amy Eric "
         "Angela Jonathan Anna Priya Mohammed Wei Yuki Carlos Sofia Olga Ahmed Fatima Hiroshi Ingrid Pierre").split()
LAST = ("Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Wilson Anderson "
        "Thomas Taylor Moore Jackson Martin Lee Thompson White Harris Clark Lewis Robinson Walker Young Allen King "
        "Wright Scott Green Baker Adams Nelson Hill Campbell Mitchell Roberts Carter Phillips Evans Turner Parker "
        "Collins Edwards Stewart Morris Murphy Cook Rogers Morgan Cooper Peterson Reed Bailey Kelly Howard Patel "
        "Nakamura Schmidt Rossi Kowalski Okafor Chen Novak Dubois Larsen").split()
PLACES = ("London Paris Chicago Boston Denver Seattle Toronto Sydney Dublin Berlin Madrid Tokyo Mumbai Nairobi Lagos "
          "Cairo Houston Atlanta Phoenix Portland Glasgow Manchester Edinburgh Vancouver Melbourne Auckland Texas "
          "California Ohio Florida Oregon Scotland Wales Canada Mexico Brazil Germany France Italy Spain Japan India "
          "China Kenya Egypt Norway Sweden Ireland Australia Europe Africa Asia").split()
ORGS = ("the city council|the board|the committee|the university|the hospital|the school district|the museum|"
        "the government|the company|the team|the library|the union|the police department|the research group|"
        "the bank|the airline|the court|the ministry|the club|the charity|the orchestra|the newspaper|the startup|"
        "the fire department|the national park service|the local theatre").split("|")
NOUNS = ("time year people way day man woman child world life hand part place case week company system program "
         "question work government number night point home water room mother area money story fact month lot right "
         "study book eye job word business issue side kind head house service friend father power hour game line "
         "end member law car city community name president team minute idea kid body information back parent face "
         "others level office door health person art war history party result change morning reason research girl "
         "guy moment air teacher force education foot boy age policy process music market sense nation plan college "
         "interest death experience effect class control care field development role effort rate heart drug show "
         "leader light voice wife police mind price report decision son view relationship town road arm difference "
         "thing value building action model season society tax director position player record paper space ground "
         "form event official matter center couple site project activity star table need court oil situation cost "
         "industry figure street image phone data picture practice piece land product doctor wall patient worker "
         "news test movie north love support technology step baby computer type attention film tree source window "
         "garden river island mountain bridge kitchen letter bottle engine island forest coffee dinner weather "
         "budget schedule meeting deadline contract proposal network software battery camera screen machine signal "
         "sample theory method answer problem solution chapter lesson exam student campus village harbor").split()
ADJ = ("good new first last long great little own other old right big high different small large next early young "
       "important few public bad same able late hard major better economic strong possible whole free military true "
       "federal international full special easy clear recent certain personal open red difficult available likely "
       "short single medical current wrong private past foreign fine common poor natural significant similar hot "
       "dead central happy serious ready simple left physical general environmental financial blue democratic dark "
       "various entire close legal religious cold final main green nice huge popular traditional cultural quiet "
       "bright heavy careful strange quick gentle ancient modern busy empty famous tiny narrow brilliant curious "
       "remarkable terrible wonderful obvious rapid sudden steady").split()
ADV = ("really quickly slowly carefully probably actually certainly finally suddenly quietly clearly simply "
       "usually nearly almost rather quite often never always sometimes recently eventually apparently honestly "
       "basically definitely immediately gradually").split()
# (base, third person, past, -ing)
VERBS = [tuple(v.split(",")) for v in (
    "make,makes,made,making take,takes,took,taking see,sees,saw,seeing find,finds,found,finding "
    "give,gives,gave,giving tell,tells,told,telling build,builds,built,building buy,buys,bought,buying "
    "bring,brings,brought,bringing write,writes,wrote,writing read,reads,read,reading leave,leaves,left,leaving "
    "meet,meets,met,meeting keep,keeps,kept,keeping hold,holds,held,holding lose,loses,lost,losing "
    "pay,pays,paid,paying send,sends,sent,sending open,opens,opened,opening change,changes,changed,changing "
    "follow,follows,followed,following create,creates,created,creating offer,offers,offered,offering "
    "remember,remembers,remembered,remembering consider,considers,considered,considering "
    "watch,watches,watched,watching explain,explains,explained,explaining carry,carries,carried,carrying "
    "describe,describes,described,describing improve,improves,improved,improving "
    "review,reviews,reviewed,reviewing cancel,cancels,cancelled,cancelling fix,fixes,fixed,fixing "
    "discuss,discusses,discussed,discussing support,supports,supported,supporting move,moves,moved,moving "
    "publish,publishes,published,publishing visit,visits,visited,visiting test,tests,tested,testing "
    "approve,approves,approved,approving announce,announces,announced,announcing measure,measures,measured,measuring"
).split()]
VERBS_INTR = [tuple(v.split(",")) for v in (
    "arrive,arrives,arrived,arriving wait,waits,waited,waiting work,works,worked,working "
    "agree,agrees,agreed,agreeing laugh,laughs,laughed,laughing travel,travels,travelled,travelling "
    "sleep,sleeps,slept,sleeping run,runs,ran,running fall,falls,fell,falling rise,rises,rose,rising "
    "grow,grows,grew,growing listen,listens,listened,listening smile,smiles,smiled,smiling "
    "disappear,disappears,disappeared,disappearing return,returns,returned,returning"
).split()]
FILLERS = ("well, | so | you know, | I mean, | okay, | right, | actually, | um, | uh, | and then | but | oh, | "
           "honestly, | look, | anyway, ").split("|")
CLOCK = ("a.m.", "p.m.", "o'clock")
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
MONTHS = "January February March April May June July August September October November December".split()
UNITS = "percent|miles|kilometers|dollars|pounds|euros|people|hours|minutes|years|degrees|meters|votes|pages".split("|")
SUBJECT_AREAS = ("physics|chemistry|biology|economics|history|music|mathematics|medicine|computer science|"
                 "engineering|philosophy|geography|linguistics|astronomy|psychology").split("|")


IRREGULAR = {"man": "men", "woman": "women", "child": "children", "person": "people", "foot": "feet", "kid": "kids",
             "life": "lives", "wife": "wives", "others": "others", "news": "news", "data": "data", "police": "police"}


def plural_of(noun: str) -> str:
    if noun in IRREGULAR:
        return IRREGULAR[noun]
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


class TextGenerator:
    def __init__(self, seed: int = 0):
        self.r = random.Random(seed)

    # --------------------------------------------------------------- pieces
    def pick(self, seq):
        return self.r.choice(seq)

    def name(self) -> str:
        return f"{self.pick(FIRST)} {self.pick(LAST)}" if self.r.random() < 0.6 else self.pick(FIRST)

    def number(self) -> str:
        k = self.r.random()
        if k < 0.35:
            return str(self.r.randint(2, 20))
        if k < 0.6:
            return str(self.r.randint(21, 999))
        if k < 0.75:
            return f"{self.r.randint(1, 99)}.{self.r.randint(1, 9)}"
        if k < 0.9:
            return f"{self.r.randint(1, 99)},{self.r.randint(0, 999):03d}"
        return str(self.r.choice([1950, 1969, 1984, 1999, 2001, 2010, 2015, 2020, 2023, 2024, 2025]))

    def np(self, plural: bool | None = None) -> str:
        """A noun phrase."""
        noun = self.pick(NOUNS)
        if plural is None:
            plural = self.r.random() < 0.3
        if plural:
            noun = plural_of(noun)
        adj = f"{self.pick(ADJ)} " if self.r.random() < 0.5 else ""
        det = self.pick(["the", "the", "a", "this", "that", "our", "their", "my", "your", "every"]) if not plural else \
            self.pick(["the", "some", "these", "those", "many", "our", "two", "several", "all the"])
        if det == "a" and (adj or noun)[0] in "aeiou":
            det = "an"
        return f"{det} {adj}{noun}"

    def subject(self) -> tuple[str, bool]:
        k = self.r.random()
        if k < 0.3:
            return self.name(), False
        if k < 0.5:
            return self.pick(["I", "we", "they", "you"]), True
        if k < 0.6:
            return self.pick(["he", "she", "it"]), False
        if k < 0.75:
            return self.pick(ORGS), False
        return self.np(plural=False), False

    def vp(self, plural_subject: bool) -> str:
        v = self.pick(VERBS)
        tense = self.r.random()
        if tense < 0.45:
            verb = v[2]
        elif tense < 0.7:
            verb = v[0] if plural_subject else v[1]
        elif tense < 0.85:
            verb = f"{'are' if plural_subject else 'is'} {v[3]}"
        else:
            verb = f"{self.pick(['will', 'should', 'might', 'could', 'can', 'would'])} {v[0]}"
        tail = ""
        t = self.r.random()
        if t < 0.25:
            tail = f" {self.pick(['in', 'at', 'near', 'from', 'for', 'with'])} {self.np()}"
        elif t < 0.4:
            tail = f" in {self.pick(PLACES)}"
        elif t < 0.5:
            tail = f" on {self.pick(DAYS)}"
        elif t < 0.6:
            tail = f" {self.pick(ADV)}"
        return f"{verb} {self.np()}{tail}"

    # --------------------------------------------------------------- sentence types
    def declarative(self) -> str:
        s, pl = self.subject()
        return f"{s} {self.vp(pl)}."

    def compound(self) -> str:
        a, b = self.declarative()[:-1], self.declarative()[:-1]
        return f"{a}, {self.pick(['and', 'but', 'so', 'because', 'while', 'although', 'after', 'before'])} {b[0].lower() + b[1:]}."

    def question(self) -> str:
        k = self.r.random()
        if k < 0.3:
            return f"{self.pick(['Did', 'Do', 'Should', 'Can', 'Will', 'Could'])} {self.pick(['you', 'we', 'they'])} {self.pick(VERBS)[0]} {self.np()}?"
        if k < 0.6:
            return f"{self.pick(['What', 'Why', 'How', 'When', 'Where'])} {self.pick(['did', 'do', 'should', 'can', 'will'])} {self.pick(['you', 'we', 'they', 'I'])} {self.pick(VERBS)[0]} {self.np()}?"
        if k < 0.8:
            return f"Is {self.np(plural=False)} {self.pick(ADJ)} enough?"
        return f"Have you seen {self.np()}?"

    def news(self) -> str:
        org = self.pick(ORGS)
        k = self.r.random()
        if k < 0.25:
            return f"On {self.pick(DAYS)}, {org} {self.pick(VERBS)[2]} {self.np()} in {self.pick(PLACES)}."
        if k < 0.5:
            return (f"{org[0].upper() + org[1:]} said the {self.pick(NOUNS)} rose by {self.number()} "
                    f"{self.pick(UNITS)} in {self.pick(MONTHS)}.")
        if k < 0.75:
            return f"According to {self.name()}, {self.np()} {self.pick(VERBS)[2]} {self.np()} last {self.pick(['week', 'month', 'year', 'night'])}."
        return f"The {self.pick(ADJ)} {self.pick(NOUNS)} in {self.pick(PLACES)} will cost about {self.number()} {self.pick(UNITS)}."

    def conversation(self) -> str:
        f = self.pick(FILLERS).strip()
        s = self.pick([
            f"I think {self.np()} is {self.pick(ADJ)}",
            f"I don't know if {self.np()} {self.pick(VERBS)[2]} {self.np()}",
            f"we {self.pick(['should', 'could', 'need to'])} {self.pick(VERBS)[0]} {self.np()} {self.pick(['today', 'tomorrow', 'soon', 'first', 'again'])}",
            f"that's {self.pick(['exactly', 'not really', 'kind of', 'pretty much'])} what {self.name()} said",
            f"can you {self.pick(VERBS)[0]} {self.np()} for me",
            f"it was {self.pick(ADV)} {self.pick(ADJ)}, to be honest",
            f"yeah, yeah, I {self.pick(VERBS_INTR)[2]} {self.pick(['yesterday', 'last week', 'this morning', 'earlier'])}",
            f"let me {self.pick(VERBS)[0]} {self.np()} and get back to you",
        ])
        s = f"{f} {s}" if f and self.r.random() < 0.6 else s
        return s[0].upper() + s[1:] + self.pick([".", ".", "?", "!"])

    def narrative(self) -> str:
        return self.pick([
            f"{self.name()} {self.pick(VERBS)[2]} {self.np()} and {self.pick(VERBS_INTR)[2]} {self.pick(ADV)}.",
            f"The {self.pick(NOUNS)} was {self.pick(ADJ)} and {self.pick(ADJ)}, and nobody {self.pick(VERBS)[2]} it.",
            f"When {self.pick(['she', 'he', 'they'])} {self.pick(VERBS_INTR)[2]}, {self.np()} had already {self.pick(VERBS)[2]} {self.np()}.",
            f"\"{self.pick(['Wait', 'Listen', 'Look', 'Come here', 'Stop'])},\" said {self.pick(FIRST)}, \"{self.np()} is {self.pick(ADJ)}.\"",
            f"It was a {self.pick(ADJ)} {self.pick(['morning', 'evening', 'night', 'day'])} in {self.pick(MONTHS)}.",
        ])

    def instruction(self) -> str:
        return self.pick([
            f"First, {self.pick(VERBS)[0]} {self.np()}, then {self.pick(VERBS)[0]} {self.np()}.",
            f"Please {self.pick(VERBS)[0]} {self.np()} before {self.pick(DAYS)}.",
            f"Make sure you {self.pick(VERBS)[0]} {self.np()} {self.pick(ADV)}.",
            f"Step {self.r.randint(1, 9)}: {self.pick(VERBS)[0]} {self.np()}.",
            f"Don't forget to {self.pick(VERBS)[0]} {self.np()}.",
        ])

    def numbers(self) -> str:
        return self.pick([
            f"The meeting is on {self.pick(DAYS)}, {self.pick(MONTHS)} {self.r.randint(1, 28)}, at {self.r.randint(1, 12)} {self.pick(CLOCK)}.",
            f"We sold {self.number()} {plural_of(self.pick(NOUNS))} in {self.r.randint(1990, 2025)}.",
            f"The price went from {self.r.randint(2, 90)} to {self.r.randint(91, 400)} dollars.",
            f"Call me at {self.r.randint(200, 999)} {self.r.randint(100, 999)} {self.r.randint(1000, 9999)}.",
            f"About {self.r.randint(2, 95)} percent of the {plural_of(self.pick(NOUNS))} were {self.pick(ADJ)}.",
            f"Chapter {self.r.randint(1, 30)} begins on page {self.r.randint(2, 500)}.",
        ])

    def meeting(self) -> str:
        return self.pick([
            f"Okay, so the next item on the agenda is {self.np()}.",
            f"{self.pick(FIRST)}, do you want to give us an update on {self.np()}?",
            f"We're {self.pick(['behind', 'ahead of', 'on'])} schedule with {self.np()}.",
            f"I'll send {self.np()} to {self.pick(FIRST)} after the call.",
            f"Let's take that offline and come back to it {self.pick(['next week', 'on ' + self.pick(DAYS), 'tomorrow'])}.",
            f"The {self.pick(NOUNS)} budget is {self.number()} {self.pick(['dollars', 'euros', 'pounds'])} this quarter.",
        ])

    def lecture(self) -> str:
        area = self.pick(SUBJECT_AREAS)
        return self.pick([
            f"In {area}, {self.np()} is often described as {self.np()}.",
            f"Today we will look at how {self.np()} affects {self.np()}.",
            f"The main idea of {area} here is that {self.np()} {self.pick(VERBS)[1]} {self.np()}.",
            f"If you remember the last lecture on {area}, {self.np()} was {self.pick(ADJ)}.",
            f"There are {self.pick(['two', 'three', 'four', 'several'])} reasons for this: {self.np()}, {self.np()}, and {self.np()}.",
        ])

    def sentence(self) -> str:
        kinds = (self.declarative, self.compound, self.question, self.news, self.conversation, self.narrative,
                 self.instruction, self.numbers, self.meeting, self.lecture)
        weights = (3, 2, 2, 3, 3, 2, 1, 2, 2, 2)
        s = self.r.choices(kinds, weights)[0]()
        return s[0].upper() + s[1:]

    def utterance(self, sentences: int | None = None) -> str:
        n = sentences or self.r.choice([1, 1, 2, 2, 3])
        return " ".join(self.sentence() for _ in range(n))


if __name__ == "__main__":
    g = TextGenerator(0)
    for _ in range(15):
        print(g.utterance())
