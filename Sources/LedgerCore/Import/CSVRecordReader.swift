/// A streaming RFC 4180 reader over bytes: quoted fields (with `""` for a quote, delimiters, line breaks
/// and JSON inside them), CRLF or LF records, a chosen delimiter (`,` or `;`). Pure: the bytes come from
/// `read`, a function that answers the next chunk (empty at the end), so a file of any size is read in
/// constant memory.
///
/// Each record remembers the line it starts on, so that an error can name the line and the column.
public struct CSVRecordReader {
    public struct Record: Sendable, Hashable {
        /// The physical line (1-based) the record starts on.
        public var line: Int
        public var fields: [String]
    }

    public struct SyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
        public var line: Int
        /// The 1-based field (column) number in its record.
        public var column: Int
        public var reason: String
        public var description: String { "line \(line), column \(column): \(reason)" }

        public init(line: Int, column: Int, reason: String) {
            self.line = line
            self.column = column
            self.reason = reason
        }
    }

    private let read: () -> [UInt8]
    private var buffer: [UInt8] = []
    private var index = 0
    private var eof = false
    /// The current physical line (1-based).
    public private(set) var line = 1
    public var delimiter: UInt8
    /// The longest field read (a file without its closing quote would otherwise be read whole into one field).
    public static let maxFieldBytes = 1 << 20

    public init(delimiter: UInt8 = UInt8(ascii: ","), read: @escaping () -> [UInt8]) {
        self.delimiter = delimiter
        self.read = read
    }

    private mutating func peek() -> UInt8? {
        if index < buffer.count { return buffer[index] }
        guard !eof else { return nil }
        buffer = read()
        index = 0
        if buffer.isEmpty {
            eof = true
            return nil
        }
        return buffer[0]
    }

    /// The next record, or nil at the end of the input. A blank line is skipped.
    public mutating func next() throws(SyntaxError) -> Record? {
        // Skip blank lines between records.
        while let b = peek(), b == 0x0A || b == 0x0D {
            index += 1
            if b == 0x0A { line += 1 }
        }
        guard peek() != nil else { return nil }
        let start = line
        var fields: [String] = []
        var field: [UInt8] = []
        while true {
            // One field.
            field.removeAll(keepingCapacity: true)
            if peek() == 0x22 {
                index += 1
                var closed = false
                while let b = peek() {
                    index += 1
                    if b == 0x22 {
                        if peek() == 0x22 {
                            index += 1
                            field.append(0x22)
                        } else {
                            closed = true
                            break
                        }
                    } else {
                        if b == 0x0A { line += 1 }
                        field.append(b)
                        if field.count > Self.maxFieldBytes { throw tooLong(start, fields.count + 1) }
                    }
                }
                guard closed else {
                    throw SyntaxError(line: start, column: fields.count + 1, reason: "a quoted field is not closed before the end of the file")
                }
                if let b = peek(), b != delimiter, b != 0x0A, b != 0x0D {
                    throw SyntaxError(
                        line: line, column: fields.count + 1,
                        reason: "unexpected character after a closing quote (a quote inside a quoted field is written \"\")")
                }
            } else {
                while let b = peek(), b != delimiter, b != 0x0A, b != 0x0D {
                    if b == 0x22 {
                        throw SyntaxError(
                            line: line, column: fields.count + 1, reason: "a quote inside an unquoted field (quote the whole field)")
                    }
                    field.append(b)
                    index += 1
                    if field.count > Self.maxFieldBytes { throw tooLong(line, fields.count + 1) }
                }
            }
            guard let text = String(validating: field, as: UTF8.self) else {
                throw SyntaxError(line: line, column: fields.count + 1, reason: "is not valid UTF-8")
            }
            fields.append(text)
            switch peek() {
            case let b? where b == delimiter:
                index += 1
            case 0x0D?:
                index += 1
                if peek() == 0x0A { index += 1 }
                line += 1
                return Record(line: start, fields: fields)
            case 0x0A?:
                index += 1
                line += 1
                return Record(line: start, fields: fields)
            default:
                return Record(line: start, fields: fields)
            }
        }
    }

    private func tooLong(_ line: Int, _ column: Int) -> SyntaxError {
        SyntaxError(line: line, column: column, reason: "a field is longer than \(Self.maxFieldBytes / 1024) KiB (a quote not closed?)")
    }
}
