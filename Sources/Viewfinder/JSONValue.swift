import Foundation

/// A JSON value, as stage options and pipeline files carry them.
public enum JSONValue: Sendable, Equatable, Codable, CustomStringConvertible {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let d = try Self.number(c) { self = .number(d) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    /// The number in `c`; nil when it holds no number. A number `Double` cannot hold (`1e309`) is
    /// that error, not a guess at another kind ("must be an object").
    private static func number(_ c: any SingleValueDecodingContainer) throws -> Double? {
        do { return try c.decode(Double.self) } catch DecodingError.dataCorrupted(let context) {
            throw DecodingError.dataCorrupted(context)
        } catch {
            return nil
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .number(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    public var description: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return String(b)
        case .number(let d): return fmt(d)
        case .string(let s): return s
        case .array(let a): return "[" + a.map(\.description).joined(separator: ",") + "]"
        case .object(let o): return "{" + o.sorted(by: { $0.key < $1.key }).map { "\($0.key)=\($0.value)" }.joined(separator: ",") + "}"
        }
    }

    /// Interprets a command-line word: `true`/`false`, a number, a list `a/b`, else a string.
    ///
    /// The list is found by the same split that makes it (by Character): a `/` that a combining
    /// mark joins to the next character (`/` + U+0940) is not a separator. Testing with
    /// Foundation's `contains("/")`, which finds the scalar, and then splitting by Character,
    /// which does not, recursed on the same word until the stack overflowed (FuzzPipeline).
    public init(commandLine word: String) {
        if word == "true" { self = .bool(true) }
        else if word == "false" { self = .bool(false) }
        else if let d = Double(word) { self = .number(d) }
        else {
            let items = word.split(separator: "/", omittingEmptySubsequences: false)
            self = items.count > 1 ? .array(items.map { JSONValue(commandLine: String($0)) }) : .string(word)
        }
    }
}

/// A JSON decoding error in the words of the file or request a person wrote: where (the key path
/// as the JSON spells it, `stages[0].enabled`, snake_case when `snakeCase`) and what was wrong
/// (`true or false`, `a number`), without Swift's type names or coding-key dumps.
package func jsonDecodingFailure(_ error: any Error, snakeCase: Bool = false) -> String {
    guard let e = error as? DecodingError else { return "\(error)" }
    func name(_ key: String) -> String {
        guard snakeCase else { return key }
        var out = ""
        for c in key {
            if c.isUppercase { out += "_" + c.lowercased() } else { out.append(c) }
        }
        return out
    }
    func path(_ keys: [any CodingKey]) -> String {
        var s = ""
        for k in keys {
            if let i = k.intValue { s += "[\(i)]" } else { s += (s.isEmpty ? "" : ".") + name(k.stringValue) }
        }
        return s
    }
    func at(_ keys: [any CodingKey]) -> String { keys.isEmpty ? "the top level" : "'\(path(keys))'" }
    func kind(_ t: Any.Type) -> String {
        switch t {
        case is Bool.Type: return "true or false"
        case is String.Type: return "a string"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt64.Type, is UInt32.Type, is UInt.Type, is Double.Type, is Float.Type: return "a number"
        default:
            let n = String(describing: t)
            return n.hasPrefix("Array") || n.hasPrefix("[") ? "a list" : "an object"
        }
    }
    switch e {
    case .keyNotFound(let k, let c): return "\(at(c.codingPath + [k])) is missing"
    case .typeMismatch(let t, let c): return "\(at(c.codingPath)) must be \(kind(t))"
    case .valueNotFound(let t, let c): return "\(at(c.codingPath)) is null where \(kind(t)) belongs"
    case .dataCorrupted(let c):
        if c.codingPath.isEmpty {
            let detail = (c.underlyingError as NSError?)?.userInfo[NSDebugDescriptionErrorKey].map { "\($0)" }
            return "not valid JSON" + (detail.map { " (\($0))" } ?? "")
        }
        return "\(at(c.codingPath)): \(c.debugDescription)"
    @unknown default: return "\(error)"
    }
}

/// What `JSONDecoder` passes over or words badly in `data` (JSON), said with the key's path
/// (`stages[0].options.target`): a key an object gives twice (the decoder keeps one of the two
/// without a word, where the command line calls an option given twice a usage error), or a number
/// no `Double` holds (`1e309`, `1e-400`: the decoder says only "not valid JSON", or blames the
/// list around it). Nil when there is neither, or the text is not JSON.
package func jsonProblem(in data: Data) -> String? {
    var scanner = JSONKeyScanner(bytes: [UInt8](data))
    return scanner.run()
}

private struct JSONKeyScanner {
    let bytes: [UInt8]
    var i = 0
    var found: String?

    init(bytes: [UInt8]) { self.bytes = bytes }

    mutating func run() -> String? {
        _ = value(path: "", depth: 0)
        return found
    }

    mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    /// After a member of an object or a list: true at a ',' (another follows), false at `close`
    /// (the end), both consumed; nil at anything else (not JSON).
    mutating func separator(closing close: UInt8) -> Bool? {
        skipSpace()
        guard i < bytes.count else { return nil }
        if bytes[i] == UInt8(ascii: ",") { i += 1; return true }
        if bytes[i] == close { i += 1; return false }
        return nil
    }

    /// Skips one value; false when the text is not JSON, too deep, or a duplicate was found.
    mutating func value(path: String, depth: Int) -> Bool {
        guard depth < 512, found == nil else { return false }
        skipSpace()
        guard i < bytes.count else { return false }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            i += 1
            var keys = Set<String>()
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return true }
            while true {
                skipSpace()
                guard let key = string() else { return false }
                let p = path.isEmpty ? key : path + "." + key
                if !keys.insert(key).inserted { found = "'\(p)' is given twice"; return false }
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return false }
                i += 1
                guard value(path: p, depth: depth + 1), let more = separator(closing: UInt8(ascii: "}")) else { return false }
                if !more { return true }
            }
        case UInt8(ascii: "["):
            i += 1
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return true }
            var n = 0
            while true {
                guard value(path: path + "[\(n)]", depth: depth + 1), let more = separator(closing: UInt8(ascii: "]")) else { return false }
                if !more { return true }
                n += 1
            }
        case UInt8(ascii: "\""):
            return string() != nil
        default:
            // A number or a literal: up to the next delimiter.
            let start = i
            while i < bytes.count, ![UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x0A, 0x0D, 0x09].contains(bytes[i]) { i += 1 }
            guard i > start else { return false }
            let token = String(decoding: bytes[start..<i], as: UTF8.self)
            // JSON's number grammar only (Double(_:) also takes NaN, inf and hex, which are no JSON).
            let numeric = token.first.map { $0 == "-" || $0.isASCII && $0.isNumber } ?? false
                && token.allSatisfy({ $0.isASCII && ($0.isNumber || "+-.eE".contains($0)) })
            if numeric, let d = Double(token) {
                // Past Double's range (inf), or under it (a non-zero mantissa read as 0).
                let mantissa = token.prefix { $0 != "e" && $0 != "E" }
                if !d.isFinite || (d == 0 && mantissa.contains(where: { $0 >= "1" && $0 <= "9" })) {
                    found = "\(path.isEmpty ? "the number" : "'\(path)'") is a number out of range (\(token))"
                    return false
                }
            }
            return true
        }
    }

    /// A string at `i` (escapes decoded: `"a"` and `"\u0061"` are one key); nil when none is there.
    mutating func string() -> String? {
        guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { return nil }
        let start = i
        i += 1
        var escaped = false
        while i < bytes.count {
            let b = bytes[i]
            i += 1
            if b == UInt8(ascii: "\\") { escaped = true; i += 1; continue }
            if b == UInt8(ascii: "\"") {
                let raw = bytes[(start + 1)..<(i - 1)]
                if !escaped { return String(decoding: raw, as: UTF8.self) }
                return try? JSONDecoder().decode(String.self, from: Data(bytes[start..<i]))
            }
        }
        return nil
    }
}
