package tokenize

// wordList holds common English words, lowercase ASCII letters only, most frequent first
// (roughly). Each was checked to be exactly one token with a leading space in both
// cl100k_base and o200k_base; TestWordsSingleToken keeps that true and NewBuilder checks it
// again for the encoding it is given. Because every word is pure letters preceded by one
// space, tiktoken's pre-tokenizer splits " w1 w2 w3" into the pieces " w1", " w2", " w3"
// and BPE never merges across pieces, so a run of k words is exactly k tokens (the tests
// check this over the whole length range rather than trusting the argument).
//
// The first fillerWords words are the filler vocabulary; all of them serve as digits of the
// per-request and per-block heads. Do not reorder or edit words without reason: the text of
// every prompt (and so server-side prefix-cache behaviour across versions) depends on it.
const wordList = `
the of and to in is that for it as was with be by
on not he this are or his from at which but have an they
you were her she there one all we their has been would will if
more when its who no so can what out about up them some time
into only other new could these two may then do first any my now
such like our over man me even most made after also did many before
must through back years where much your way well down should because each just
those people how too little state good very make world still own see men
work long get here between both life being under never day same another know
while last might us great old year off come since against go came right
used take three states himself few house use during without again place around however
home small found thought went say part once general high upon school every does
got united left number course war until always away something fact though water less
public put think almost hand enough far took head yet government system better set
told nothing night end why called find look asked later point knew city next
program business give group toward young days let room president side social given present
several order national possible rather second face per among form important often things looked
early white case become large need big four within felt along children saw best
church ever least power development light thing seemed family interest want members mind country
area others done turned although open god service problem certain kind different thus began
door help sense means whole matter perhaps itself york times law human line above
name example action company hands local show whether five history gave today either act
feet across taken past quite anything seen having death experience body word half really
week field car words already themselves information tell college shall money period held keep
sure free seems political real behind cannot question office brought whose special heard major
problems ago became federal moment study available known result street economic boy position reason
change south board individual job society areas west close turn love community true court
force full seem am age wife future voice center woman control common policy necessary
following front sometimes six girl clear further land run students provide feel party able
mother music education university child effect level stood military town short morning total outside
rate figure class art century washington north usually leave therefore evidence percent black sound
top plan strong believe private play road english tax stand view table data market
lost fire hope sort hear decided department value cost series gone space sat particular
provided test care ground report nature personal earth fall oil tried husband difference bring
basis read month economy answer friends meet paper modern subject growth middle trade low
thinking moved minutes analysis character ready easy process direct worked attention heart labor summer
trying produce simple remember energy record role book spring student window chance inside truth
nation practice natural floor late account price wall trouble fine material speak recent straight
approach stage river serious theory hold list style population fear beautiful building region moving
amount lay physical stop picture doubt sun bed feeling island weather sky cell garden
tree forest mountain ocean lake stone glass metal wood animal bird fish horse dog
cat flower grass leaf seed fruit apple bread milk coffee tea sugar salt rice
meat egg cheese butter soup dinner lunch breakfast kitchen chair desk lamp clock phone
radio camera computer screen keyboard letter message story song movie game team player ball
score goal coach captain winner match race track speed distance journey travel train plane
ship boat bridge tower castle palace temple museum library hospital bank store shop hotel
restaurant factory farm village valley desert beach coast harbor bay shore wave wind storm
rain snow ice cloud thunder lightning season winter autumn hour minute evening dawn sunset
noon midnight tomorrow yesterday memory dream idea purpose method structure pattern model design shape
size color red blue green yellow orange purple pink brown gray silver gold bright
dark heavy soft hard smooth rough warm cold hot cool dry wet clean dirty
fresh ancient quick slow fast happy sad angry calm quiet loud gentle cruel brave
proud humble wise foolish rich poor weak tall wide narrow deep shallow thick thin
sharp flat round square complex difficult safe dangerous healthy sick alive dead empty closed
busy strange familiar famous popular rare usual normal regular final main minor basic central
global foreign domestic cultural mental moral legal medical scientific technical classic formal honest fair
equal false actual likely significant obvious specific unique various similar separate single double entire
complete perfect worse worst earlier latest previous current former eastern western northern southern upper
lower inner outer nearby distant remote rural urban coastal tropical accept add admit allow
appear apply argue arrive avoid bear beat begin belong break breathe build burn buy
call carry catch cause charge check choose claim climb collect compare complain consider contain
continue cook copy count cover create cross cry cut dance deal decide defend deliver
depend describe destroy develop die discover discuss divide draw dress drink drive drop earn
eat enjoy enter escape establish examine exist expect explain express fail feed fight fill
finish fit fly fold follow forget forgive gain gather grow guess handle hang happen
hate heal hide hit hunt hurry identify ignore imagine improve include increase indicate influence
inform insist intend introduce invite join judge jump kill kick kiss knock laugh lead
learn lend lie lift listen live lose manage mark marry measure mention mix move
notice obtain occur offer organize paint pass pay perform pick plant pour prefer prepare
press prevent promise protect prove pull punish push raise reach realize receive recognize reduce
reflect refuse relate release remain remove repair repeat replace reply represent require rest return
reveal ride ring rise roll rule rush save search seek select sell send serve
settle shake share shine shoot shout shut sing sink sit sleep slide smell smile
solve spend spread start stay steal step stick succeed suffer suggest supply support suppose
surprise survive swim talk teach tear tend thank throw touch treat trust try understand
visit wait wake walk warn wash watch wear win wish wonder worry write ability
absence academy accident achievement activity actor address advantage adventure advice affair agency agent agreement
aid aim air airport alarm album alcohol alliance anger angle anxiety apartment appeal appearance
application appointment architect argument arm army arrival article artist aspect assembly asset assistance atmosphere
attack attempt attitude audience author authority average award baby background balance band bar base
basket battle bean beauty bedroom beer bell belt bench benefit bicycle bill birth birthday
bit blade blanket block blood blow bone bonus border bottle bottom bowl box brain
branch brand breath brick bride brother budget bus button cabin cable cake camp campaign
cancer candidate capital card career carpet cash category ceiling chain chairman challenge champion channel
chapter chest chicken chief choice circle citizen climate club coat code coin collection column
comfort comment commission committee competition concept concern concert condition conference confidence conflict connection consequence
constant contact content contest context contract contribution conversation corner cottage cotton council counter county
couple courage cousin cream crew crime crisis criticism crop crowd crown culture cup currency
curve customer cycle damage danger daughter debate debt decade decision degree delay demand deposit
depth desire detail device diet direction director disaster discipline discount discussion disease dish display
district doctor document dollar domain drama drawing driver drug duty eagle ear edge editor
effort election element elephant emergency emotion employee employer engine engineer entry environment episode equipment
error essay estate event exam exchange exercise exhibition expert explanation expression extent factor failure
faith fan farmer fashion fault feature fee fence festival fiction file film finger flag
flight flow focus folk food foot football formula fortune foundation frame freedom friend friendship
fuel fun function fund funeral furniture gallery gap garage gas gate gene generation gift
girlfriend glove golf grade grain grandfather grandmother guard guest guide guitar gun habit hair
hall hat health height hero highway hill hole holiday honey honor horror host household
housing hunger ideal image impact income index industry infant inflation injury insect instance institution
instrument insurance intention internet interview invention investment iron issue item jacket joke journal juice
jury justice key king knee knife knowledge lady landscape language laughter lawyer layer leader
league lecture leg lesson license limit link lip liquid load loan location lock logic
loss luck machine magazine mail manager manner map marriage mass master meal meaning media
meeting member menu mess mile mirror mission mistake mixture mode mood motor mouse mouth
movement mud muscle mystery nail native neck negotiation neighbor nerve net network news newspaper
noise nose note novel nurse object objective occasion officer opinion opportunity option organ origin
outcome owner pace package page pain pair panel parent park partner passage passenger passion
path patient payment peace pen pencil pension pepper performance permission person phase philosophy photo
phrase piano piece pilot pipe pitch plate platform pleasure plenty pocket poem poet poetry
pole police pool port portion post pot potato pound poverty powder prayer preference pressure
pride priest prince princess principle print priority prison prize procedure product profession professor profile
profit progress project promotion proof property proposal protection protest psychology pub purchase quality quantity
queen quote rabbit range rank ratio reader reality recipe reference reform relation relief religion
rent representative reputation request research resident resolution resource response responsibility revenue review revolution reward
rhythm risk rival rock roof root rope route routine row safety sail salad salary
sale sample sand sauce scale scene schedule scheme science scope script sea seat secret
secretary section sector security selection self sentence sequence session setting shadow sheet shelf shell
shift shirt shock shoe shot shoulder signal silence silk sister site situation skill skin
slice slope smoke snake soil soldier solution son source speech spirit sport spot staff
stake standard star statement station status steel stock stomach storage strategy strength stress string
stroke struggle studio stuff substance success suit surface surgery survey suspect symbol sympathy tail
talent tank target task taste teacher technique technology teeth temperature tennis tension term territory
text theme thread threat ticket title tone tongue tool tooth topic tour tourist towel
toy tradition traffic tragedy transport trial trick trip troop truck tube tune tunnel twin
union unit user vacation variety vegetable vehicle version victim victory video violence virus vision
visitor volume vote wage wealth weapon wedding weekend weight welcome wheel wine wing wisdom
witness worker writer yard youth zone below beneath beside beyond except near throughout anyway
apart certainly clearly completely currently daily directly easily else especially eventually exactly finally forward
fully generally gently hardly highly honestly indeed instead largely mainly maybe merely mostly nearly
neither normally otherwise possibly probably quickly quietly rarely recently simply slightly slowly soon suddenly
surely together twice widely
`
