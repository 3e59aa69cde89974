from services.common.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CorpusDocument(_message.Message):
    __slots__ = ("doc_id", "title", "text")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    title: str
    text: str
    def __init__(self, doc_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class CorpusInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CorpusInfoResponse(_message.Message):
    __slots__ = ("name", "incarnation", "documents", "write_seq")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    WRITE_SEQ_FIELD_NUMBER: _ClassVar[int]
    name: str
    incarnation: str
    documents: int
    write_seq: int
    def __init__(self, name: _Optional[str] = ..., incarnation: _Optional[str] = ..., documents: _Optional[int] = ..., write_seq: _Optional[int] = ...) -> None: ...

class CorpusSearchRequest(_message.Message):
    __slots__ = ("query", "k")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    query: str
    k: int
    def __init__(self, query: _Optional[str] = ..., k: _Optional[int] = ...) -> None: ...

class CorpusHit(_message.Message):
    __slots__ = ("doc_id", "title", "text", "version", "score")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    title: str
    text: str
    version: int
    score: float
    def __init__(self, doc_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., version: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...

class CorpusSearchResponse(_message.Message):
    __slots__ = ("hits", "reads", "incarnation")
    HITS_FIELD_NUMBER: _ClassVar[int]
    READS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[CorpusHit]
    reads: _containers.RepeatedCompositeFieldContainer[_common_pb2.RecordVersion]
    incarnation: str
    def __init__(self, hits: _Optional[_Iterable[_Union[CorpusHit, _Mapping]]] = ..., reads: _Optional[_Iterable[_Union[_common_pb2.RecordVersion, _Mapping]]] = ..., incarnation: _Optional[str] = ...) -> None: ...

class CorpusConfirmRequest(_message.Message):
    __slots__ = ("hits",)
    HITS_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[CorpusHit]
    def __init__(self, hits: _Optional[_Iterable[_Union[CorpusHit, _Mapping]]] = ...) -> None: ...

class CorpusConfirmResponse(_message.Message):
    __slots__ = ("current", "incarnation")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    current: bool
    incarnation: str
    def __init__(self, current: _Optional[bool] = ..., incarnation: _Optional[str] = ...) -> None: ...

class CorpusGetRequest(_message.Message):
    __slots__ = ("doc_id",)
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    def __init__(self, doc_id: _Optional[str] = ...) -> None: ...

class CorpusGetResponse(_message.Message):
    __slots__ = ("found", "document", "version")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    found: bool
    document: CorpusDocument
    version: int
    def __init__(self, found: _Optional[bool] = ..., document: _Optional[_Union[CorpusDocument, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class CorpusVersionsRequest(_message.Message):
    __slots__ = ("record_ids",)
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, record_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CorpusVersionsResponse(_message.Message):
    __slots__ = ("versions", "incarnation")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedScalarFieldContainer[int]
    incarnation: str
    def __init__(self, versions: _Optional[_Iterable[int]] = ..., incarnation: _Optional[str] = ...) -> None: ...

class CorpusTitlesRequest(_message.Message):
    __slots__ = ("after", "limit")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after: str
    limit: int
    def __init__(self, after: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class CorpusTitle(_message.Message):
    __slots__ = ("doc_id", "version", "title")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    version: int
    title: str
    def __init__(self, doc_id: _Optional[str] = ..., version: _Optional[int] = ..., title: _Optional[str] = ...) -> None: ...

class CorpusTitlesResponse(_message.Message):
    __slots__ = ("titles", "more")
    TITLES_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    titles: _containers.RepeatedCompositeFieldContainer[CorpusTitle]
    more: bool
    def __init__(self, titles: _Optional[_Iterable[_Union[CorpusTitle, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class CorpusBeginWriteRequest(_message.Message):
    __slots__ = ("header", "upserts", "removals")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    UPSERTS_FIELD_NUMBER: _ClassVar[int]
    REMOVALS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    upserts: _containers.RepeatedCompositeFieldContainer[CorpusDocument]
    removals: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., upserts: _Optional[_Iterable[_Union[CorpusDocument, _Mapping]]] = ..., removals: _Optional[_Iterable[str]] = ...) -> None: ...

class CorpusBeginReconcileRequest(_message.Message):
    __slots__ = ("header", "write_seq")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    WRITE_SEQ_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    write_seq: int
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., write_seq: _Optional[int] = ...) -> None: ...

class CorpusWriteTicket(_message.Message):
    __slots__ = ("ticket", "floors", "lease_s")
    TICKET_FIELD_NUMBER: _ClassVar[int]
    FLOORS_FIELD_NUMBER: _ClassVar[int]
    LEASE_S_FIELD_NUMBER: _ClassVar[int]
    ticket: str
    floors: _containers.RepeatedCompositeFieldContainer[_common_pb2.RecordVersion]
    lease_s: float
    def __init__(self, ticket: _Optional[str] = ..., floors: _Optional[_Iterable[_Union[_common_pb2.RecordVersion, _Mapping]]] = ..., lease_s: _Optional[float] = ...) -> None: ...

class CorpusCommitRequest(_message.Message):
    __slots__ = ("header", "ticket", "versions")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    ticket: str
    versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.RecordVersion]
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., ticket: _Optional[str] = ..., versions: _Optional[_Iterable[_Union[_common_pb2.RecordVersion, _Mapping]]] = ...) -> None: ...

class CorpusCommitResponse(_message.Message):
    __slots__ = ("written",)
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    written: _containers.RepeatedCompositeFieldContainer[_common_pb2.RecordVersion]
    def __init__(self, written: _Optional[_Iterable[_Union[_common_pb2.RecordVersion, _Mapping]]] = ...) -> None: ...

class CorpusAbortRequest(_message.Message):
    __slots__ = ("ticket",)
    TICKET_FIELD_NUMBER: _ClassVar[int]
    ticket: str
    def __init__(self, ticket: _Optional[str] = ...) -> None: ...

class CorpusAbortResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...
