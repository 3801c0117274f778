"""The SOQL subset the stand-in answers: a tokenizer and a recursive-descent parser.

SELECT f1, f2, Account.Name FROM Contact [WHERE ...] [ORDER BY f [ASC|DESC] [NULLS FIRST|LAST], ...]
[LIMIT n] [OFFSET n], and SELECT COUNT() FROM ... [WHERE ...]. WHERE takes =, !=, <>, <, <=, >, >=,
[NOT] IN (...), LIKE, AND / OR / NOT and parentheses; values are the literals `format_soql` writes
(quoted strings with backslash escapes, numbers, true/false, null, dates and date-times).
Field names are checked by the caller (the store knows the object's fields), not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

KEYWORDS = {
    "SELECT", "FROM", "WHERE", "ORDER", "BY", "ASC", "DESC", "NULLS", "FIRST", "LAST", "LIMIT", "OFFSET",
    "AND", "OR", "NOT", "IN", "LIKE", "NULL", "TRUE", "FALSE", "COUNT",
}
ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", "%": "\\%", "_": "\\_"}
OPERATORS = ("!=", "<>", "<=", ">=", "=", "<", ">")


class SoqlError(ValueError):
    """A query the stand-in cannot parse; `code` is Salesforce's errorCode (MALFORMED_QUERY or INVALID_FIELD)."""

    def __init__(self, message: str, code: str = "MALFORMED_QUERY"):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Token:
    kind: str  # "word", "keyword", "string", "number", "datetime", "date", "op", "punct", "end"
    text: str
    value: object = None
    position: int = 0


@dataclass(frozen=True)
class Comparison:
    field: str
    operator: str  # =, !=, <, <=, >, >=, IN, NOT IN, LIKE
    value: object  # a literal, or a tuple of literals for IN


@dataclass(frozen=True)
class BoolOp:
    operator: str  # AND, OR
    operands: tuple


@dataclass(frozen=True)
class Not:
    operand: object


@dataclass(frozen=True)
class OrderKey:
    field: str
    descending: bool = False
    nulls_first: bool = True


@dataclass
class Query:
    object_name: str
    fields: list[str] = field(default_factory=list)  # empty for COUNT()
    count: bool = False
    where: object | None = None
    order_by: list[OrderKey] = field(default_factory=list)
    limit: int | None = None
    offset: int = 0


def tokenize(text: str) -> list[Token]:
    """Split a query into tokens; keywords are recognised case-insensitively, as Salesforce does."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char.isspace():
            i += 1
        elif char == "'":
            start, i, chars = i, i + 1, []
            while True:
                if i >= n:
                    raise SoqlError(f"unterminated string literal at position {start}")
                if text[i] == "\\":
                    if i + 1 >= n or text[i + 1] not in ESCAPES:
                        raise SoqlError(f"invalid escape sequence at position {i}")
                    chars.append(ESCAPES[text[i + 1]])
                    i += 2
                elif text[i] == "'":
                    i += 1
                    break
                else:
                    chars.append(text[i])
                    i += 1
            tokens.append(Token("string", text[start:i], "".join(chars), start))
        elif char.isdigit() or (char == "-" and i + 1 < n and text[i + 1].isdigit()):
            start = i
            i += 1
            while i < n and (text[i].isalnum() or text[i] in ".:+-"):
                i += 1
            tokens.append(_number_or_date(text[start:i], start))
        elif char.isalpha() or char == "_":
            start = i
            while i < n and (text[i].isalnum() or text[i] in "_."):
                i += 1
            word = text[start:i]
            kind = "keyword" if word.upper() in KEYWORDS else "word"
            tokens.append(Token(kind, word, word.upper() if kind == "keyword" else word, start))
        elif char in "(),":
            tokens.append(Token("punct", char, char, i))
            i += 1
        else:
            operator = next((op for op in OPERATORS if text.startswith(op, i)), None)
            if operator is None:
                raise SoqlError(f"unexpected character {char!r} at position {i}")
            tokens.append(Token("op", operator, "!=" if operator == "<>" else operator, i))
            i += len(operator)
    tokens.append(Token("end", "", None, n))
    return tokens


def _number_or_date(text: str, position: int) -> Token:
    """A number, a date (2024-01-31) or a date-time (2024-01-31T10:00:00Z, ...+00:00, ...+0000)."""
    if "T" in text:
        candidate = text.replace("Z", "+00:00")
        if len(candidate) >= 5 and candidate[-5] in "+-" and candidate[-3] != ":":
            candidate = candidate[:-2] + ":" + candidate[-2:]
        try:
            value = datetime.fromisoformat(candidate)
        except ValueError:
            raise SoqlError(f"invalid date-time literal {text!r} at position {position}") from None
        if value.tzinfo is None:
            raise SoqlError(f"date-time literal {text!r} lacks a time zone (add Z)")
        return Token("datetime", text, value.astimezone(timezone.utc), position)
    if text.count("-") == 2 and not text.startswith("-"):
        try:
            return Token("date", text, date.fromisoformat(text), position)
        except ValueError:
            raise SoqlError(f"invalid date literal {text!r} at position {position}") from None
    try:
        return Token("number", text, float(text) if "." in text else int(text), position)
    except ValueError:
        raise SoqlError(f"invalid number {text!r} at position {position}") from None


class Parser:
    """Recursive descent over the token list; one method per grammar rule."""

    def __init__(self, text: str):
        self.tokens = tokenize(text)
        self.index = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def _advance(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def _at_keyword(self, *words: str) -> bool:
        return self.current.kind == "keyword" and self.current.value in words

    def _expect_keyword(self, word: str) -> None:
        if not self._at_keyword(word):
            raise SoqlError(f"expected {word} at position {self.current.position}, found {self.current.text or 'end of query'!r}")
        self._advance()

    def _expect_punct(self, char: str) -> None:
        if not (self.current.kind == "punct" and self.current.value == char):
            raise SoqlError(f"expected {char!r} at position {self.current.position}, found {self.current.text or 'end of query'!r}")
        self._advance()

    def _name(self) -> str:
        token = self.current
        if token.kind != "word":
            raise SoqlError(f"expected a field name at position {token.position}, found {token.text or 'end of query'!r}")
        self._advance()
        return token.text

    def _integer(self) -> int:
        token = self._advance()
        if token.kind != "number" or not isinstance(token.value, int) or token.value < 0:
            raise SoqlError(f"expected a non-negative integer at position {token.position}")
        return token.value

    def parse(self) -> Query:
        self._expect_keyword("SELECT")
        fields: list[str] = []
        count = False
        if self._at_keyword("COUNT"):
            self._advance()
            self._expect_punct("(")
            self._expect_punct(")")
            count = True
        else:
            fields.append(self._name())
            while self.current.kind == "punct" and self.current.value == ",":
                self._advance()
                fields.append(self._name())
        self._expect_keyword("FROM")
        query = Query(object_name=self._name(), fields=fields, count=count)
        if self._at_keyword("WHERE"):
            self._advance()
            query.where = self._or()
        if self._at_keyword("ORDER"):
            self._advance()
            self._expect_keyword("BY")
            query.order_by.append(self._order_key())
            while self.current.kind == "punct" and self.current.value == ",":
                self._advance()
                query.order_by.append(self._order_key())
        if self._at_keyword("LIMIT"):
            self._advance()
            query.limit = self._integer()
        if self._at_keyword("OFFSET"):
            self._advance()
            query.offset = self._integer()
        if self.current.kind != "end":
            raise SoqlError(f"unexpected token {self.current.text!r} at position {self.current.position}")
        return query

    def _order_key(self) -> OrderKey:
        name = self._name()
        descending = False
        if self._at_keyword("ASC", "DESC"):
            descending = self._advance().value == "DESC"
        nulls_first = not descending  # Salesforce's default: nulls first ascending, last descending
        if self._at_keyword("NULLS"):
            self._advance()
            if not self._at_keyword("FIRST", "LAST"):
                raise SoqlError(f"expected FIRST or LAST after NULLS at position {self.current.position}")
            nulls_first = self._advance().value == "FIRST"
        return OrderKey(name, descending, nulls_first)

    def _or(self) -> object:
        return self._chain("OR", self._and)

    def _and(self) -> object:
        return self._chain("AND", self._not)

    def _chain(self, keyword: str, operand: Callable[[], object]) -> object:
        """operand (keyword operand)*: one BoolOp over them all, or the lone operand."""
        operands = [operand()]
        while self._at_keyword(keyword):
            self._advance()
            operands.append(operand())
        return operands[0] if len(operands) == 1 else BoolOp(keyword, tuple(operands))

    def _not(self) -> object:
        if self._at_keyword("NOT"):
            self._advance()
            return Not(self._not())
        if self.current.kind == "punct" and self.current.value == "(":
            self._advance()
            inner = self._or()
            self._expect_punct(")")
            return inner
        return self._comparison()

    def _comparison(self) -> Comparison:
        name = self._name()
        token = self.current
        if token.kind == "op":
            self._advance()
            return Comparison(name, token.value, self._literal())
        if self._at_keyword("LIKE"):
            self._advance()
            pattern = self._advance()
            if pattern.kind != "string":
                raise SoqlError(f"LIKE needs a quoted string at position {pattern.position}")
            return Comparison(name, "LIKE", pattern.value)
        negated = False
        if self._at_keyword("NOT"):
            self._advance()
            negated = True
        if self._at_keyword("IN"):
            self._advance()
            self._expect_punct("(")
            values = [self._literal()]
            while self.current.kind == "punct" and self.current.value == ",":
                self._advance()
                values.append(self._literal())
            self._expect_punct(")")
            return Comparison(name, "NOT IN" if negated else "IN", tuple(values))
        raise SoqlError(f"expected an operator after {name} at position {token.position}, found {token.text or 'end of query'!r}")

    def _literal(self) -> object:
        token = self._advance()
        if token.kind in ("string", "number", "datetime", "date"):
            return token.value
        if token.kind == "keyword" and token.value in ("NULL", "TRUE", "FALSE"):
            return {"NULL": None, "TRUE": True, "FALSE": False}[token.value]
        raise SoqlError(f"expected a value at position {token.position}, found {token.text or 'end of query'!r}")


def parse(text: str) -> Query:
    """Parse one SOQL query of the subset; SoqlError (MALFORMED_QUERY) otherwise."""
    return Parser(text).parse()


def like_matcher(pattern: str):
    """A case-insensitive matcher for a LIKE pattern: % any run, _ one character, \\% and \\_ literal."""
    parts: list[tuple[str, str]] = []  # ("lit", text) | ("any", "") | ("one", "")
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern) and pattern[i + 1] in "%_":
            parts.append(("lit", pattern[i + 1]))
            i += 2
            continue
        parts.append(("any", "") if pattern[i] == "%" else ("one", "") if pattern[i] == "_" else ("lit", pattern[i].lower()))
        i += 1

    def matches(value: str) -> bool:
        text = value.lower()
        # positions reachable after each part (a small NFA walk, no backtracking blow-up)
        positions = {0}
        for kind, literal in parts:
            if kind == "lit":
                positions = {p + 1 for p in positions if p < len(text) and text[p] == literal.lower()}
            elif kind == "one":
                positions = {p + 1 for p in positions if p < len(text)}
            else:
                start = min(positions) if positions else None
                positions = set(range(start, len(text) + 1)) if start is not None else set()
            if not positions:
                return False
        return len(text) in positions

    return matches
