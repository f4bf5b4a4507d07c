/// The parts of a file path, in plain Swift. Foundation's `NSString` path methods
/// (`deletingLastPathComponent`, `lastPathComponent`, `pathExtension`, …) trap on a one-character
/// name with this toolchain's Foundation (Swift 6.3.1 on Linux: `--metadata a` crashed the
/// command, 1 Dec), so the engine and its command line take paths apart here.
public enum PathName {
    /// `path` without trailing slashes (a path of slashes only stays "/").
    static func trimmed(_ path: String) -> Substring {
        var s = Substring(path)
        while s.count > 1 && s.hasSuffix("/") { s = s.dropLast() }
        return s
    }

    /// The folder `path` is in: "." for a bare name, "/" for a name in the root.
    public static func folder(of path: String) -> String {
        let s = trimmed(path)
        guard let slash = s.lastIndex(of: "/") else { return "." }
        var dir = s[..<slash]
        while dir.count > 1 && dir.hasSuffix("/") { dir = dir.dropLast() }
        return dir.isEmpty ? "/" : String(dir)
    }

    /// The last component of `path` (its name), without trailing slashes.
    public static func lastComponent(_ path: String) -> String {
        let s = trimmed(path)
        guard s != "/", let slash = s.lastIndex(of: "/") else { return String(s) }
        return String(s[s.index(after: slash)...])
    }

    /// The extension of `path`'s name (without the dot; "" when it has none — a name that starts
    /// with its only dot, such as ".profile", has none).
    public static func pathExtension(_ path: String) -> String {
        let name = lastComponent(path)
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return String(name[name.index(after: dot)...])
    }

    /// `path` without its name's extension and its dot.
    public static func deletingPathExtension(_ path: String) -> String {
        let ext = pathExtension(path)
        let s = trimmed(path)
        return ext.isEmpty ? String(s) : String(s.dropLast(ext.count + 1))
    }

    /// `name` in `folder`.
    public static func appending(_ name: String, to folder: String) -> String {
        folder.isEmpty ? name : folder.hasSuffix("/") ? folder + name : folder + "/" + name
    }
}
