"""A ``multipart/form-data`` request body parsed as it arrives (OpenAI's audio API sends its file so, as
``file``; whisper-asr-webservice's clients as ``audio_file``): the file's part is written straight to the request's spool file, the other parts are kept as
text fields, bounded in number and size.

Starlette's ``request.form()`` would put the file in a temporary file of its own, outside the spool
(which removes a killed server's uploads at the next start) and after reading the whole body through
its own loop (no body timeout); so the body goes through :func:`specwhisper.serving.http.uploads.receive_body`
like every other upload, into this parser (python-multipart's, the one Starlette uses).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import BinaryIO

from fastapi import Request
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from specwhisper.messages import clip
from specwhisper.serving.http.uploads import Refusal, Uploads

FILE_FIELD = "file"
MAX_FIELDS = 64  # text fields in one request
MAX_FIELD_BYTES = 64 * 1024  # one text field (a prompt is at most a few hundred tokens)
# OpenAI's known speakers' reference clips come as data URLs in text fields: up to 4, of 2 to 10 s each
# there (a 10 s 48 kHz stereo WAV is 2.6 MB in base64); ours take up to 30 s, in 4 MiB a field (30 s of
# 16 kHz mono WAV is 1.3 MB)
CLIP_FIELDS = ("known_speaker_references[]", "known_speaker_references")
MAX_CLIP_FIELDS = 4
MAX_CLIP_FIELD_BYTES = 4 << 20
# a text to align (align_text) is a script, up to the option's million characters: 4 MiB of UTF-8 at most
ALIGN_FIELD, MAX_ALIGN_FIELD_BYTES = "align_text", 4 << 20
FORM_OVERHEAD = (1 << 20) + MAX_CLIP_FIELDS * MAX_CLIP_FIELD_BYTES + MAX_ALIGN_FIELD_BYTES  # the text fields around the file


def bad_form(message: str, status: int = 400, param: str | None = None) -> Refusal:
    """A malformed body is answered before it is read to its end: the connection closes."""
    return Refusal(status, message, close=True, param=param)


async def receive_form(uploads: Uploads, request: Request, path: Path, file_field: str = FILE_FIELD) -> FormUpload:
    """The request's form, parsed as it arrives (``FormUpload``), its file in ``path``, within the upload's
    size limit and body timeout."""
    form = FormUpload(request.headers.get("content-type"), path, uploads.limits.max_upload_bytes, file_field)
    try:
        await uploads.receive(request, form, uploads.limits.max_upload_bytes + FORM_OVERHEAD)
        form.finish()
    finally:
        form.close()
    return form


class FormUpload:
    """The sink :func:`receive_body` writes the body to: ``write(chunk)`` parses as it goes, ``finish()``
    checks the body ended well, ``close()`` closes the file whatever happened. Then ``fields`` holds the
    text fields (name -> values, in order), ``has_file``/``file_size``/``file_name`` describe the file."""

    def __init__(self, content_type: str | None, path: Path, max_file_bytes: int, file_field: str = FILE_FIELD):
        kind, options = parse_options_header(content_type or "")
        if kind != b"multipart/form-data":
            shown = clip(kind.decode("latin-1"), 60) or "none"
            raise bad_form(f"the body must be multipart/form-data with a '{file_field}' part (Content-Type: {shown})")
        boundary = options.get(b"boundary")
        if not boundary:
            raise bad_form("the multipart/form-data Content-Type has no boundary")
        self.path, self.max_file_bytes, self.file_field = path, max_file_bytes, file_field
        self.fields: dict[str, list[str]] = defaultdict(list)
        self.has_file, self.file_size, self.file_name = False, 0, None
        self._count = 0
        self._clips = 0
        self._out: BinaryIO | None = None
        self._name: str | None = None
        self._data = bytearray()
        self._header: tuple[bytearray, bytearray] = (bytearray(), bytearray())
        self._disposition = b""
        self._ended = False
        try:
            self._parser = MultipartParser(boundary, {
                "on_part_begin": self._part_begin, "on_part_data": self._part_data, "on_part_end": self._part_end,
                "on_header_field": lambda data, start, end: self._header[0].extend(data[start:end]),
                "on_header_value": lambda data, start, end: self._header[1].extend(data[start:end]),
                "on_header_end": self._header_end, "on_headers_finished": self._headers_finished,
                "on_end": self._end,
            })
        except FormParserError as exc:
            raise bad_form(f"the multipart/form-data boundary is not valid ({clip(str(exc), 80)})") from None

    def write(self, chunk: bytes) -> None:
        try:
            self._parser.write(chunk)
        except FormParserError as exc:
            raise bad_form(f"the multipart/form-data body is malformed ({clip(str(exc), 80)})") from None

    def finish(self) -> None:
        self._parser.finalize()
        if not self._ended:
            raise Refusal(400, "the multipart/form-data body ended before its closing boundary")

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def _part_begin(self) -> None:
        self._name, self._disposition = None, b""
        self._data.clear()

    def _header_end(self) -> None:
        name, value = self._header
        if bytes(name).strip().lower() == b"content-disposition":
            self._disposition = bytes(value)
        name.clear()
        value.clear()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if b"name" not in options:
            raise bad_form("a multipart part has no name (its Content-Disposition must say name=\"...\")")
        self._name = options[b"name"].decode("utf-8", "replace")
        if self._name == self.file_field:
            if self.has_file:
                raise bad_form(f"'{self.file_field}' is given twice (send one audio file per request)", param=self.file_field)
            self.has_file = True
            filename = options.get(b"filename")
            self.file_name = filename.decode("utf-8", "replace") if filename is not None else None
            self._out = self.path.open("wb")
            return
        self._count += 1
        if self._count > MAX_FIELDS:
            raise bad_form(f"the form has more than {MAX_FIELDS} fields")
        if self._name in CLIP_FIELDS:
            self._clips += 1
            if self._clips > MAX_CLIP_FIELDS:
                raise bad_form(f"{self._name}: at most {MAX_CLIP_FIELDS} reference clips", param=self._name)

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._out is not None:
            self.file_size += end - start
            if self.file_size > self.max_file_bytes:
                raise bad_form(f"{self.file_field}: the upload is larger than {self.max_file_bytes} bytes", status=413,
                               param=self.file_field)
            self._out.write(data[start:end])
            return
        self._data.extend(data[start:end])
        most = (MAX_CLIP_FIELD_BYTES if self._name in CLIP_FIELDS else MAX_ALIGN_FIELD_BYTES if self._name == ALIGN_FIELD
                else MAX_FIELD_BYTES)
        if len(self._data) > most:
            raise bad_form(f"{clip(str(self._name), 60)}: the field is larger than {most} bytes", param=self._name)

    def _part_end(self) -> None:
        if self._out is not None:
            self.close()
            return
        try:
            self.fields[str(self._name)].append(self._data.decode("utf-8"))
        except UnicodeDecodeError:
            raise bad_form(f"{clip(str(self._name), 60)}: the field is not UTF-8 text", param=self._name) from None

    def _end(self) -> None:
        self._ended = True
