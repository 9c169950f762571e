// JNDI (the JDK's own LDAP client) against slapd directly and through the
// router, for tests/e2e/protocol/connection_state.rs. Run as a single-file program:
//   java tests/interop/Jndi.java CHECK URL [USER PASSWORD]
// CHECK:
//   schema  getSchema(""): counts the object classes and attribute types
//   search  simple bind as uid=USER, a search, a server-side sorted search
//           and a paged one (both need a connection of the client's own)
//   sasl    DIGEST-MD5 bind as USER, then a search
// Prints one line of key=value pairs; exits 1 on any failure.
import java.util.ArrayList;
import java.util.Hashtable;
import java.util.List;
import javax.naming.Context;
import javax.naming.NamingEnumeration;
import javax.naming.directory.DirContext;
import javax.naming.directory.SearchControls;
import javax.naming.directory.SearchResult;
import javax.naming.ldap.Control;
import javax.naming.ldap.InitialLdapContext;
import javax.naming.ldap.LdapContext;
import javax.naming.ldap.PagedResultsControl;
import javax.naming.ldap.PagedResultsResponseControl;
import javax.naming.ldap.SortControl;
import javax.naming.ldap.SortKey;
import javax.naming.ldap.SortResponseControl;

public class Jndi {
    static final String PEOPLE = "ou=people,o=DEMOCORP,c=AU";
    static final String FILTER = "(objectClass=inetOrgPerson)";

    static Hashtable<String, Object> env(String url) {
        Hashtable<String, Object> env = new Hashtable<>();
        env.put(Context.INITIAL_CONTEXT_FACTORY, "com.sun.jndi.ldap.LdapCtxFactory");
        env.put(Context.PROVIDER_URL, url);
        env.put(Context.REFERRAL, "ignore");
        env.put("com.sun.jndi.ldap.connect.timeout", "5000");
        env.put("com.sun.jndi.ldap.read.timeout", "20000");
        return env;
    }

    static int count(LdapContext ctx, String filter, SearchControls sc) throws Exception {
        int n = 0;
        NamingEnumeration<SearchResult> r = ctx.search(PEOPLE, filter, sc);
        while (r.hasMore()) {
            r.next();
            n++;
        }
        return n;
    }

    static SearchControls subtree() {
        SearchControls sc = new SearchControls();
        sc.setSearchScope(SearchControls.SUBTREE_SCOPE);
        sc.setReturningAttributes(new String[] {"cn"});
        return sc;
    }

    static void schema(String url) throws Exception {
        DirContext ctx = new InitialLdapContext(env(url), null);
        DirContext schema = ctx.getSchema("");
        int classes = 0, attrs = 0;
        for (NamingEnumeration<?> e = schema.list("ClassDefinition"); e.hasMore(); e.next()) classes++;
        for (NamingEnumeration<?> e = schema.list("AttributeDefinition"); e.hasMore(); e.next()) attrs++;
        System.out.println("objectClasses=" + classes + " attributeTypes=" + attrs);
        if (classes == 0) throw new IllegalStateException("no object classes");
        ctx.close();
    }

    static void search(String url, String user, String pw) throws Exception {
        Hashtable<String, Object> env = env(url);
        env.put(Context.SECURITY_AUTHENTICATION, "simple");
        env.put(Context.SECURITY_PRINCIPAL, "uid=" + user + "," + PEOPLE);
        env.put(Context.SECURITY_CREDENTIALS, pw);
        LdapContext ctx = new InitialLdapContext(env, null);
        SearchControls sc = subtree();
        int plain = count(ctx, "(uid=bob)", sc);
        // Sorted by cn (ordering rule given: cn has none in core.schema).
        ctx.setRequestControls(new Control[] {
            new SortControl(new SortKey[] {new SortKey("cn", true, "2.5.13.3")}, Control.CRITICAL)});
        List<String> names = new ArrayList<>();
        NamingEnumeration<SearchResult> r = ctx.search(PEOPLE, FILTER, sc);
        while (r.hasMore()) names.add(((String) r.next().getAttributes().get("cn").get()).toLowerCase());
        boolean sortedOk = false;
        Control[] rc = ctx.getResponseControls();
        if (rc != null) for (Control c : rc) {
            if (c instanceof SortResponseControl) {
                SortResponseControl s = (SortResponseControl) c;
                if (!s.isSorted()) throw s.getException();
                sortedOk = true;
            }
        }
        List<String> want = new ArrayList<>(names);
        java.util.Collections.sort(want);
        if (!sortedOk || !names.equals(want) || names.isEmpty())
            throw new IllegalStateException("not sorted: " + names);
        // Paged, 7 per page.
        byte[] cookie = null;
        int pages = 0, total = 0;
        do {
            ctx.setRequestControls(new Control[] {new PagedResultsControl(7, cookie, Control.CRITICAL)});
            total += count(ctx, FILTER, sc);
            cookie = null;
            rc = ctx.getResponseControls();
            if (rc != null) for (Control c : rc)
                if (c instanceof PagedResultsResponseControl) cookie = ((PagedResultsResponseControl) c).getCookie();
            pages++;
        } while (cookie != null && cookie.length > 0 && pages < 100);
        System.out.println("plain=" + plain + " sorted=" + names.size() + " paged=" + total + " pages=" + pages);
        if (plain != 1 || total != names.size() || pages < 2)
            throw new IllegalStateException("unexpected counts");
        ctx.close();
    }

    static void sasl(String url, String user, String pw) throws Exception {
        Hashtable<String, Object> env = env(url);
        env.put(Context.SECURITY_AUTHENTICATION, "DIGEST-MD5");
        env.put(Context.SECURITY_PRINCIPAL, user);
        env.put(Context.SECURITY_CREDENTIALS, pw);
        env.put("javax.security.sasl.qop", "auth");
        LdapContext ctx = new InitialLdapContext(env, null);
        int n = count(ctx, "(uid=" + user + ")", subtree());
        System.out.println("sasl=DIGEST-MD5 entries=" + n);
        if (n != 1) throw new IllegalStateException("search after the SASL bind");
        ctx.close();
    }

    public static void main(String[] args) {
        try {
            switch (args[0]) {
                case "schema": schema(args[1]); break;
                case "search": search(args[1], args[2], args[3]); break;
                case "sasl": sasl(args[1], args[2], args[3]); break;
                default: throw new IllegalArgumentException("unknown check " + args[0]);
            }
            System.exit(0);
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
    }
}
