// Finds the stage types of a target's Swift sources: classes that conform to `Stage` (directly,
// through a protocol of the target that refines `Stage`, or by inheriting from a stage class of
// the target) and types given the conformance in an extension (`extension Foo: Stage`). What it
// cannot register — a generic stage class with no concrete subclass, a private or local class —
// is a diagnostic naming the file and the line.
import Foundation

/// One error, printed as `file:line: error: message` so that the build shows it at its place.
struct Diagnostic: Error, Equatable, CustomStringConvertible {
    let file: String
    let line: Int
    let message: String
    var description: String { "\(file):\(line): error: \(message)" }
}

/// A stage type to register.
struct FoundStage: Equatable, Comparable {
    /// The name to write in Swift (`Outer.Inner` for nested types).
    let name: String
    let isPublic: Bool
    let file: String
    let line: Int
    static func < (a: FoundStage, b: FoundStage) -> Bool { a.name < b.name }
}

/// A type declaration or extension found in a source file.
struct Declaration {
    enum Kind: String { case `class`, `struct`, `enum`, actor, `extension`, `protocol` }
    let kind: Kind
    /// Qualified with the enclosing types (`Outer.Inner`).
    let name: String
    let access: String
    let isGeneric: Bool
    let inherits: [String]
    /// Inside a function or closure body rather than at file or type scope.
    let isLocal: Bool
    /// Every enclosing type is at least as visible as public.
    let enclosingPublic: Bool
    let file: String
    let line: Int
}

enum StageScanner {
    static let stageNames: Set<String> = ["Stage", "Viewfinder.Stage"]

    /// Removes comments and string literals (keeping line breaks, so lines still count right).
    static func stripCommentsAndStrings(_ text: String) -> String {
        let it = Array(text.unicodeScalars)
        var out = String.UnicodeScalarView()
        var i = 0
        let n = it.count
        func keepNewlines(_ from: Int, _ to: Int) { for k in from..<min(to, n) where it[k] == "\n" { out.append("\n") } }
        while i < n {
            let c = it[i]
            if c == "/" && i + 1 < n && it[i + 1] == "/" {
                while i < n && it[i] != "\n" { i += 1 }
            } else if c == "/" && i + 1 < n && it[i + 1] == "*" {
                let start = i
                var depth = 1; i += 2
                while i < n && depth > 0 {
                    if it[i] == "/" && i + 1 < n && it[i + 1] == "*" { depth += 1; i += 2 }
                    else if it[i] == "*" && i + 1 < n && it[i + 1] == "/" { depth -= 1; i += 2 }
                    else { i += 1 }
                }
                out.append(" ")
                keepNewlines(start, i)
            } else if c == "\"" {
                let start = i
                let triple = i + 2 < n && it[i + 1] == "\"" && it[i + 2] == "\""
                i += triple ? 3 : 1
                while i < n {
                    if it[i] == "\\" { i += 2; continue }
                    if triple {
                        if it[i] == "\"" && i + 2 < n && it[i + 1] == "\"" && it[i + 2] == "\"" { i += 3; break }
                    } else if it[i] == "\"" || it[i] == "\n" { i += 1; break }
                    i += 1
                }
                out.append("\""); out.append("\"")
                keepNewlines(start, i)
            } else {
                out.append(c); i += 1
            }
        }
        return String(out)
    }

    /// `[attributes] [modifiers] class|struct|enum|actor|extension|protocol Name[<…>][: A, B][where …] {`
    static let header = try! NSRegularExpression(pattern:
        #"(?:^|(?<=[\s;{}]))((?:@[\w.]+(?:\([^)]*\))?\s+)*)((?:(?:public|open|internal|package|fileprivate|private|final|indirect|nonisolated)\s+)*)\b(class|struct|enum|actor|extension|protocol)\s+([A-Za-z_][\w.]*)\s*(<[^{]*?>)?\s*(?::\s*([^{]*?))?\s*(\bwhere\s[^{]*)?\{"#)

    /// The declarations of one file, each with its enclosing types resolved.
    static func declarations(in source: String, file: String) -> [Declaration] {
        let text = stripCommentsAndStrings(source)
        let ns = text as NSString
        // Line of each UTF-16 offset: the number of line breaks before it, plus one.
        var lineStarts: [Int] = [0]
        for (i, ch) in text.utf16.enumerated() where ch == 10 { lineStarts.append(i + 1) }
        func lineOf(_ offset: Int) -> Int {
            var lo = 0, hi = lineStarts.count - 1
            while lo < hi { let mid = (lo + hi + 1) / 2; if lineStarts[mid] <= offset { lo = mid } else { hi = mid - 1 } }
            return lo + 1
        }
        var byBrace: [Int: (Declaration.Kind, String, String, Bool, [String], Int)] = [:]
        for m in header.matches(in: text, range: NSRange(location: 0, length: ns.length)) {
            func group(_ k: Int) -> String? { m.range(at: k).location == NSNotFound ? nil : ns.substring(with: m.range(at: k)) }
            guard let kind = Declaration.Kind(rawValue: group(3)!), let name = group(4) else { continue }
            let modifiers = (group(2) ?? "").split(whereSeparator: \.isWhitespace).map(String.init)
            let access = modifiers.first { ["public", "open", "internal", "package", "fileprivate", "private"].contains($0) } ?? ""
            let inherits = (group(6) ?? "").split(separator: ",").flatMap { $0.split(separator: "&") }
                .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
            byBrace[m.range.location + m.range.length - 1] = (kind, name, access, group(5) != nil, inherits, lineOf(m.range(at: 3).location))
        }
        // Walk the braces: each `{` opens either a declaration's body or some other block.
        var stack: [(name: String?, isPublic: Bool)] = []
        var out: [Declaration] = []
        for (i, ch) in text.utf16.enumerated() {
            if ch == 123 { // {
                if let (kind, name, access, generic, inherits, headerLine) = byBrace[i] {
                    let isLocal = stack.contains { $0.name == nil }
                    let outer = stack.compactMap(\.name).last
                    let qualified = kind == .extension || outer == nil ? name : "\(outer!).\(name)"
                    let enclosingPublic = stack.allSatisfy(\.isPublic)
                    out.append(Declaration(kind: kind, name: qualified, access: access, isGeneric: generic, inherits: inherits,
                                           isLocal: isLocal, enclosingPublic: enclosingPublic, file: file, line: headerLine))
                    let visible = access == "public" || access == "open"
                    stack.append((qualified, kind == .extension ? (access == "public" || enclosingPublic) : visible && enclosingPublic))
                } else {
                    stack.append((nil, true))
                }
            } else if ch == 125, !stack.isEmpty { // }
                stack.removeLast()
            }
        }
        return out
    }

    /// The stage types to register among the declarations of a whole target.
    static func stages(in declarations: [Declaration]) throws -> [FoundStage] {
        var diagnostics: [Diagnostic] = []
        // Protocols of the target that refine Stage, to a fixed point.
        var conforming = stageNames
        var changed = true
        while changed {
            changed = false
            for d in declarations where d.kind == .protocol && !conforming.contains(d.name) && d.inherits.contains(where: conforming.contains) {
                conforming.insert(d.name); changed = true
            }
        }
        // Classes that conform or inherit from a stage class, to a fixed point.
        let classes = declarations.filter { $0.kind == .class }
        let extended = Set(declarations.filter { $0.kind == .extension && $0.inherits.contains(where: conforming.contains) }.map(\.name))
        var stageClasses = Set<String>()
        changed = true
        while changed {
            changed = false
            for c in classes where !stageClasses.contains(c.name) {
                let bases = c.inherits.map { $0.split(separator: "<").first.map(String.init) ?? $0 }
                if bases.contains(where: { conforming.contains($0) || stageClasses.contains($0) }) || extended.contains(c.name) {
                    stageClasses.insert(c.name); changed = true
                }
            }
        }
        var found: [FoundStage] = []
        for c in classes where stageClasses.contains(c.name) {
            if c.isGeneric {
                let hasConcreteSubclass = classes.contains { sub in !sub.isGeneric && sub.inherits.contains { $0.hasPrefix(c.name + "<") } }
                if !hasConcreteSubclass {
                    // Point at the conformance: the class itself, or the extension that gives it.
                    let ownBases = c.inherits.map { $0.split(separator: "<").first.map(String.init) ?? $0 }
                    let own = ownBases.contains { conforming.contains($0) || stageClasses.contains($0) }
                    let place = own ? c : declarations.first { $0.kind == .extension && $0.name == c.name && $0.inherits.contains(where: conforming.contains) } ?? c
                    diagnostics.append(Diagnostic(file: place.file, line: place.line, message: "generic stage class '\(c.name)' cannot be registered: the registry needs a concrete type. Add a subclass such as `final class My\(c.name): \(c.name)<Concrete> {}`"))
                }
                continue
            }
            if c.isLocal {
                diagnostics.append(Diagnostic(file: c.file, line: c.line, message: "stage class '\(c.name)' is declared inside a function; the generated registry cannot see it. Declare it at file or type scope"))
                continue
            }
            if c.access == "private" || c.access == "fileprivate" {
                diagnostics.append(Diagnostic(file: c.file, line: c.line, message: "stage class '\(c.name)' is \(c.access); the generated registry cannot see it. Make it internal or public"))
                continue
            }
            found.append(FoundStage(name: c.name, isPublic: (c.access == "public" || c.access == "open") && c.enclosingPublic, file: c.file, line: c.line))
        }
        // Conformances given in an extension to a type declared elsewhere (another module).
        let declared = Set(declarations.filter { $0.kind != .extension }.map(\.name))
        for e in declarations where e.kind == .extension && e.inherits.contains(where: conforming.contains) && !declared.contains(e.name) {
            if found.contains(where: { $0.name == e.name }) { continue }
            found.append(FoundStage(name: e.name, isPublic: e.access == "public", file: e.file, line: e.line))
        }
        if let first = diagnostics.first { throw ScanFailure(diagnostics: diagnostics, first: first) }
        var seen = Set<String>()
        for f in found.sorted() where !seen.insert(f.name).inserted {
            let d = Diagnostic(file: f.file, line: f.line, message: "stage type '\(f.name)' is declared twice")
            throw ScanFailure(diagnostics: [d], first: d)
        }
        return found.sorted()
    }

    /// The generated registry's source.
    static func render(module: String, stages: [FoundStage]) -> String {
        let allPublic = !stages.isEmpty && stages.allSatisfy(\.isPublic)
        let access = allPublic ? "public " : ""
        var text = """
        // Generated by StageRegistryPlugin from the sources of \(module). Do not edit.
        import Viewfinder

        extension StageRegistry {
            /// The stages declared in \(module): \(stages.map(\.name).joined(separator: ", ")).
            \(access)static let \(lowerCamel(module)): StageRegistry = StageRegistry(generated: [

        """
        for f in stages { text += "        \(f.name).self, // \(f.file):\(f.line)\n" }
        text += "    ])\n}\n"
        return text
    }

    static func lowerCamel(_ s: String) -> String {
        var prefixCount = 0
        for c in s { if c.isUppercase { prefixCount += 1 } else { break } }
        if prefixCount > 1 && prefixCount < s.count { prefixCount -= 1 }
        return s.prefix(max(prefixCount, 1)).lowercased() + s.dropFirst(max(prefixCount, 1))
    }
}

/// Every diagnostic of a scan (the build prints them all).
struct ScanFailure: Error, CustomStringConvertible {
    let diagnostics: [Diagnostic]
    let first: Diagnostic
    var description: String { diagnostics.map(\.description).joined(separator: "\n") }
}

